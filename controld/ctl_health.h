/* controld's health log: what happens to fgex itself rather than to the traffic. A worker that
 * is restarted and why, nftables rules put back after someone removed them, a layer switch, a
 * limit hit, traffic let through unfiltered, the store out of space. Each entry names the
 * service it concerns, or service 0 for the whole box (every service's log shows those too).
 *
 * One process-wide ring, so any stage of controld (the loop, the supervisor, the web thread)
 * notes an entry with one call and no context to carry; readers (the control API's
 * `service log`, the page) list entries after a sequence number. Thread-safe.
 *
 * The entries also go to the store (ctl_health_store.c): each loop turn writes those noted since
 * the last write, so they survive a restart; the ring keeps what could not be written yet. */
#ifndef CTL_HEALTH_H
#define CTL_HEALTH_H

#include <stddef.h>
#include <stdint.h>

#define CTL_HEALTH_KIND_MAX 24
#define CTL_HEALTH_TEXT_MAX 240
#define CTL_HEALTH_RING 4096 /* entries kept; older ones are overwritten */

enum ctl_health_level {
    CTL_HEALTH_INFO = 0, /* a change made on purpose: started, stopped, layer switched */
    CTL_HEALTH_WARN = 1, /* fgex recovered by itself: a worker replaced, rules restored */
    CTL_HEALTH_ERROR = 2 /* protection or data was lost: traffic passed unfiltered, events lost */
};

struct ctl_health_entry {
    uint64_t seq;     /* increasing from 1, never reused (a restart continues after the stored) */
    uint64_t time_ns; /* unix time */
    uint32_t service_id; /* 0: the whole box */
    enum ctl_health_level level;
    char kind[CTL_HEALTH_KIND_MAX];  /* short, stable, e.g. "worker-restart", "rules-restored" */
    char text[CTL_HEALTH_TEXT_MAX];  /* what a player reads */
    uint64_t count; /* what the entry counts (packets passed unfiltered, ...), 0 if nothing */
};

/* Note one entry (also logged at the level's log level). kind and the formatted text are
 * copied, cut to their sizes. */
void ctl_health_note(uint32_t service_id, enum ctl_health_level level, const char *kind,
                     uint64_t count, const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Copy up to max entries with seq > after_seq, oldest first, of service service_id (and the
 * box's own, service 0) or of every service when service_id is UINT32_MAX. Returns how many. */
size_t ctl_health_list(uint64_t after_seq, uint32_t service_id, struct ctl_health_entry *out,
                       size_t max);
/* The newest seq noted so far (0: none), so that a follower can tell when to list. */
uint64_t ctl_health_last_seq(void);
/* "info", "warn" or "error": a level as the control API and the store name it. */
const char *ctl_health_level_name(enum ctl_health_level level);
/* The level of such a name (an unknown one or NULL: info). */
enum ctl_health_level ctl_health_level_of(const char *name);
/* Forget every entry (unit tests). */
void ctl_health_reset(void);

/* ---- persistence (ctl_health_store.c drives these) ---- */
/* Put the stored entries (seq ascending, borrowed) before those noted since start: the ones
 * noted before the store was open are numbered after the stored ones, in their order. */
void ctl_health_restore(const struct ctl_health_entry *stored, size_t n);
/* Up to max entries not in the store yet, oldest first. Returns how many. */
size_t ctl_health_unsaved(struct ctl_health_entry *out, size_t max);
/* The entries up to seq are in the store now. */
void ctl_health_saved(uint64_t seq);

/* ---- counters that rose (limits hit, traffic passed unfiltered) ---- */
/* A service's (or the box's) kind gets one entry per CTL_HEALTH_COALESCE_MS at most: what
 * rises in between is added up and noted once that time has passed. */
#define CTL_HEALTH_COALESCE_MS 5000
/* A counter of kind rose by delta: noted at once ("312 <what> in the last 5 s") when this
 * service and kind had no entry in the last CTL_HEALTH_COALESCE_MS, else added to the next
 * entry, noted by ctl_health_tick(). what is copied; now_ms is a monotonic clock. */
void ctl_health_count(uint32_t service_id, enum ctl_health_level level, const char *kind,
                      const char *what, uint64_t delta, uint64_t now_ms);
/* Note the counts added up whose CTL_HEALTH_COALESCE_MS have passed. */
void ctl_health_tick(uint64_t now_ms);
/* The monotonic clock ctl_health_count() and ctl_health_tick() take, in ms. */
uint64_t ctl_health_mono_ms(void);

#endif
