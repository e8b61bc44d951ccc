/* `fgexctl script proxy` (issue 27): a filter file run as a local TCP proxy in front of a
 * service, for trying a file on real traffic before `script set`. The file runs where it runs
 * for a service: in a scriptworker of the proxy's own (its sandboxed interpreters, the same
 * frames, fgx/swproto.h), started here and stopped with the command. */
#ifndef CLI_SPROXY_H
#define CLI_SPROXY_H

#include <stdbool.h>
#include <stdio.h>

struct cli_sproxy_opts {
    const char *file;   /* the filter file: read again whenever it changes */
    const char *listen; /* ADDR:PORT ([V6]:PORT) the clients connect to */
    const char *to;     /* ADDR:PORT of the service */
    const char *pydir;  /* fgex's Python package */
    unsigned deadline_ms;
    bool fail_open; /* an exception or a call past the deadline lets the chunk through */
};

/* Check "ADDR:PORT" or "[V6ADDR]:PORT" (numeric). Returns 0 or -EINVAL. */
int cli_sproxy_addr_check(const char *s);

/* Run until SIGINT or SIGTERM, printing every verdict and the file's prints and log on out.
 * Returns fgexctl's exit status. */
int cli_sproxy_run(const struct cli_sproxy_opts *o, FILE *out);

#endif
