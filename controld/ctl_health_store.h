/* controld's health log in the store: loaded once at start (ctl_health.h keeps the entries in
 * memory), and what is noted since written each loop turn, in the turn it was noted, as the
 * statistics stage writes events. */
#ifndef CTL_HEALTH_STORE_H
#define CTL_HEALTH_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "controld/ctl_store.h"

/* Entries the store keeps per service, and for the box (service 0); older ones are dropped. */
#define CTL_HEALTH_KEEP 500

/* The stored entries into the health log, before those noted since start (which are numbered
 * after them). Returns 0 or a store error (the log then starts empty, logged). */
int ctl_health_load(struct ctl_store *st);
/* Note the counts now due (ctl_health_tick()), then write the entries noted since the last
 * write, in one transaction. A failure (a full disk) keeps them in memory and is tried again
 * after CTL_HEALTH_RETRY_MS, unless force (at exit). Returns 0, -EAGAIN (waiting to retry) or
 * the store's error. now_ms: a monotonic clock. */
#define CTL_HEALTH_RETRY_MS 5000
int ctl_health_save(struct ctl_store *st, uint64_t now_ms, bool force);

#endif
