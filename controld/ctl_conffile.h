/* controld's configuration file (/etc/fgex/controld.conf, or --config FILE): plain
 * `key = value` lines whose keys are the long options of controld's getopt table, turned into
 * command-line arguments placed before the real ones, so that one getopt pass applies both and
 * the command line wins. Generic over the table: an option added to it is a key at once. */
#ifndef CTL_CONFFILE_H
#define CTL_CONFFILE_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>

#define CTL_CONFFILE_DEFAULT "/etc/fgex/controld.conf"
#define CTL_CONFFILE_OPTION "config" /* the table's option that names another file */

struct ctl_conffile {
    int argc;
    char **argv;     /* argv[0], "--key=value" (or "--flag") per line of the file, then the
                      * command line's own arguments; owned, NULL-terminated */
    unsigned *line;  /* line[i]: the file's line that gave argv[i], 0 for the command line's */
    char path[4096]; /* the file read, "" when none was (no default file) */
};

/* Builds out from the command line (argc, argv) and the configuration file: --config FILE if the
 * command line names one (FILE must exist), else default_path if it exists. A line of the file
 * whose key the command line also gives is left out: for a repeatable option such as --allow,
 * the command line's values replace the file's. Flags (no_argument) take true/false, yes/no or
 * 1/0; false leaves the flag out. Returns 0, or -errno with err saying why ("FILE:LINE: ...").
 * On success the caller owns out and releases it with ctl_conffile_release(). */
int ctl_conffile_load(const struct option *opts, int argc, char **argv, const char *default_path,
                      struct ctl_conffile *out, char *err, size_t errlen);
void ctl_conffile_release(struct ctl_conffile *c);

/* "FILE line N: key = value" for a failing argv[i] that came from the file, or NULL. */
const char *ctl_conffile_origin(const struct ctl_conffile *c, int i, char *buf, size_t len);

#endif
