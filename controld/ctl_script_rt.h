/* controld, script filters at run time: each function's counters (blocked, errors, timeouts)
 * and each service's log (tracebacks, timeouts, what the scripts print), as the workers report
 * them. The log is kept in memory (a controld restart starts it again); the counters are
 * saved in the state store's meta db (CTL_SCRIPT_RT_KEY) when they change and read back at
 * start, so they survive a restart as the filters' counters do. */
#ifndef CTL_SCRIPT_RT_H
#define CTL_SCRIPT_RT_H

#include <stdint.h>

#include "control.pb-c.h"
#include "controld/ctl_apply.h"
#include "controld/ctl_script.h"

#define CTL_SCRIPT_LOG_MAX 256   /* entries kept per service, the oldest dropped first */
#define CTL_SCRIPT_LOG_TEXT 8192 /* bytes of one entry's text */

enum ctl_script_count {
    CTL_SCRIPT_BLOCKED,
    CTL_SCRIPT_ERRORS,
    CTL_SCRIPT_TIMEOUTS,
    CTL_SCRIPT_EDITED,
    CTL_SCRIPT_NCOUNTS
};

/* Add delta to a function's counter. */
void ctl_script_rt_count(uint32_t service_id, const char *function, enum ctl_script_count which,
                         uint64_t delta);
/* Append to a service's log (text is copied, cut at CTL_SCRIPT_LOG_TEXT). */
void ctl_script_rt_log_add(uint32_t service_id, const char *function, const char *kind,
                           const char *text, size_t len);
/* Entries ever appended to any service's log: the web server's live stream looks at the logs
 * only when this moved. */
uint64_t ctl_script_rt_log_count(void);
/* Put the counters into s's functions. */
void ctl_script_rt_fill(struct ctl_ctx *ctx, Fgx__Ctl__Script *s);
/* The service's log entries after seq after into out (its entries), the newest seq in *last. */
int ctl_script_rt_log(struct ctl_ctx *ctx, uint32_t service_id, uint64_t after,
                      struct ctl_script_reply *out, uint64_t *last);
/* A worker's STATS: its script log entries into the logs, and the counters they stand for
 * (block: blocked, exception: errors, timeout: timeouts). */
struct fgx_dp_stats;
void ctl_script_rt_ingest(const struct fgx_dp_stats *st);
/* The counters from the store (at start; an absent record: none). A record that does not
 * decode is said and ignored: the counters start from zero, nothing else is lost. */
struct ctl_store;
#define CTL_SCRIPT_RT_KEY "script_counters"
int ctl_script_rt_load(struct ctl_store *st);
/* The counters into the store when they changed since the last save. Returns 0 or -errno
 * (they stay unsaved, tried again at the next call). */
int ctl_script_rt_save(struct ctl_store *st);
/* The blocks of a service's script functions (their blocked counters summed): part of the
 * service's blocked total, as its filters' are. */
uint64_t ctl_script_rt_blocked(uint32_t service_id);
/* Forget a service's whole-service script failure (`script list`'s error): its file was set
 * again. */
void ctl_script_rt_error_clear(uint32_t service_id);
/* Forget a service's counters and log (its script was removed). */
void ctl_script_rt_forget(uint32_t service_id);

#endif
