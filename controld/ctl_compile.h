/* controld compile stage, the slow half: the regex checks and hyperscan databases a change
 * request needs, done in child processes off the control loop and under a time limit.
 *
 * hyperscan compiles in one call that cannot be interrupted and, for a large pattern set, takes
 * seconds to minutes. So a change request first runs as a probe (ctl_compile_collect(true)):
 * every check and database that neither the store's cache nor this session can answer is
 * recorded here instead of done, and reported as if it passed, so the probe finds all of them
 * in one run; the request is then aborted with nothing stored. ctl_compile_start() forks
 * children that do the recorded work, spread over the cores, and ctl_compile_poll(), called by
 * the control loop, collects their results without blocking: meanwhile controld answers other
 * requests, supervises the workers and collects statistics. The request then runs again, finds
 * every result in the session (ctl_compile_check_result(), ctl_compile_db_result()) and
 * completes at once. A child that runs past the limit is killed and the change refused; a
 * compiler crash takes only the child. One session at a time, owned by the control thread. */
#ifndef CTL_COMPILE_H
#define CTL_COMPILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/ruleset.h"

#define CTL_COMPILE_TIMEOUT_DEFAULT 60 /* seconds */
#define CTL_COMPILE_TIMEOUT_MAX 600    /* fgexctl waits this long for a change, and more */
#define CTL_COMPILE_KIDS_MAX 16

/* The limit on one session's compile (seconds, 1..CTL_COMPILE_TIMEOUT_MAX) and how many children
 * may compile at once (0: the online CPUs). */
void ctl_compile_config(unsigned timeout_s, unsigned kids);

/* Record instead of compiling (a probe), or stop recording. */
void ctl_compile_collect(bool on);
bool ctl_compile_collecting(void);
/* Recorded jobs without a result yet. */
size_t ctl_compile_pending(void);

/* The check of one regex, as ctl_config_regex_check() does it (and returns it). true: the
 * answer is in *rv and err (a result of this session; or, while collecting, an unknown regex,
 * recorded and reported as passing). false: not known, check it now. */
bool ctl_compile_check_result(const char *regex, bool nocase, int ipproto, int *rv, char *err,
                              size_t errlen);
/* The database of pats[] for dir, whose cache key is key, as fgx_ruleset_compile() makes it.
 * true: *rv is its result and *out (caller owns) a copy of the database; while collecting, an
 * unknown one is recorded and *out left empty with *rv 0. false: not known, compile it now. */
bool ctl_compile_db_result(const struct fgx_pattern *pats, size_t n, enum fgx_dir dir, int ipproto,
                           uint64_t key, struct fgx_blob *out, int *rv, char *err, size_t errlen);

/* Fork the children for every pending job; the time limit starts now. 0, or -errno with the
 * reason logged (nothing is left running). */
int ctl_compile_start(void);
bool ctl_compile_running(void);
/* Never blocks. *done is set once every child finished: 0 (every result is in), or -ETIMEDOUT
 * (the limit passed: the children were killed) or -ECHILD (a child died or failed), with a
 * one-line reason for the user in err. */
int ctl_compile_poll(bool *done, char *err, size_t errlen);
/* Kill what still runs and forget every job and result (and the change's words). */
void ctl_compile_reset(void);

/* The change whose compile this session is for, in words ("filter import web (2000
 * filters)"): set once, by its first probe (later rounds keep the first words and time). */
void ctl_compile_what_set(const char *what);
/* While a change's compile is under way: true, its words and the whole seconds since its
 * first compile started. */
bool ctl_compile_busy(char *what, size_t len, unsigned *secs);

/* ---- for unit tests: how the jobs are shared out ---- */

/* Share ndbs databases (sizes[i] patterns each) and nchecks checks among at most kids children:
 * the largest databases each to a child of their own first; the checks (one child per 256 at
 * most) to the children without a database, evenly, or to all of them when every child has
 * one. kid_of_db[i] gets database i's child; checks [lo[k], hi[k]) go to child k. Returns the
 * number of children (0: no job). */
size_t ctl_compile_share(const size_t *sizes, size_t ndbs, size_t nchecks, size_t kids,
                         size_t *kid_of_db, size_t *lo, size_t *hi);

#endif
