/* controld's health log, the workers' gaps: while a worker is down (dead, restarting, not yet
 * given its ruleset), its layer's running services are either not served (fail-closed) or pass
 * unfiltered (fail_open). Each such service's log says so when the gap starts, and how long it
 * lasted when it ends. Looked at each loop turn, after the supervisors' poll. */
#ifndef CTL_HEALTH_GAP_H
#define CTL_HEALTH_GAP_H

#include <stdint.h>

#include "controld/ctl_apply.h"

/* now_ms: a monotonic clock. */
void ctl_health_gap_poll(struct ctl_ctx *ctx, uint64_t now_ms);
/* Forget what was seen (unit tests; a new start). */
void ctl_health_gap_reset(void);

#endif
