/* controld statistics stage: folds the worker's STATS replies (cumulative since that worker
 * started) into totals that survive a worker restart and, through LMDB, a controld restart;
 * numbers the match events and keeps the recent ones. Read by ctl_rpc (stats, events, worker
 * list) and ctl_metrics (Prometheus). */
#ifndef CTL_STATS_H
#define CTL_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld/ctl_store.h"
#include "fgx/dp.h"

/* Events kept in memory and in LMDB by default (controld --events-keep); older ones are dropped.
 * An event is ~300 bytes in memory and about as much in LMDB: 100,000 are ~30 MiB each. */
#define CTL_EVENTS_KEEP 100000
#define CTL_EVENTS_KEEP_MAX 10000000
/* LMDB keeps up to keep + keep / CTL_EVENTS_PRUNE_DIV events: the oldest are deleted by that
 * many at once, not one per new event. */
#define CTL_EVENTS_PRUNE_DIV 16
/* A report with at least this many events means a burst: the workers are asked again sooner. */
#define CTL_EVENTS_BURST 64
/* Counters are written to LMDB at most this often (and on exit); events as they arrive. */
#define CTL_STATS_FLUSH_MS 5000

/* One service's traffic: totals across restarts, flows_active as last reported. */
struct ctl_svc_counters {
    uint64_t packets, bytes, accepted, dropped, flows_active;
    uint64_t events_lost; /* blocks whose event a worker's queue refused (total) */
    uint64_t tls_failed;  /* TLS handshakes failed or stalled, since controld started */
    /* connections that found the service's own --max-conns reached (issue 27; persisted),
     * and the unix seconds of the first and the last seen (0: none) */
    uint64_t limit_hits, limit_first, limit_last;
    /* connections that sent a flag of the game's format (issue 28), since controld started:
     * to an address outside the checker's (a flag-out event each), and to the checker */
    uint64_t flags_out, flags_to_checker;
};

/* A worker's own numbers from its last STATS (since that worker started), and the totals
 * controld keeps across its restarts. The proxy worker's has valid, instance, flows (its
 * proxied connections open), rss_bytes and its own failures; the nfq worker's has the NFQUEUE
 * counters and the totals. */
struct ctl_worker_counters {
    bool valid;        /* a STATS arrived from process `instance` */
    uint64_t instance; /* compare with ctl_sup_info.instance: stale once a new process runs */
    uint64_t queue_drops, flows, rss_bytes, truncated, verdict_errors, malformed, evasion;
    uint64_t midstream_resets, flows_evicted;
    uint64_t script_refused, script_errors, script_timeouts, script_blocked, script_final;
    uint64_t script_held, script_flows, script_reclaimed;
    uint64_t queue_drops_total, events_lost_total;
    uint64_t conns_refused, unclassified, connect_failed, scan_errors; /* proxy */
    uint64_t src_refused, evicted, silent_closed, midstream_reset, midstream_rescan; /* proxy */
};

/* Blocked connections' captures kept in LMDB by default (controld --captures-keep): each at most
 * 2 x the service's capture bytes (16 KiB by default) and its segment marks, ~35 KiB: 2,000
 * take at most ~70 MiB of the store's map (1 GiB by default). */
#define CTL_CAPTURES_KEEP 2000
#define CTL_CAPTURES_KEEP_MAX 100000

struct ctl_stats;
struct ctl_game;

/* The game's checker addresses from now on (g not set: no flag is the checker's): a flag
 * format's match (CTL_GAME_FLAG_ID) to one of them is counted in flags_to_checker and kept as
 * no event; any other is a flag-out event, counted in flags_out. */
void ctl_stats_game_set(struct ctl_stats *s, const struct ctl_game *g);

/* Load the persisted totals, the next event seq and the recent events from st. *out owned by
 * the caller (ctl_stats_free()). */
int ctl_stats_open(struct ctl_store *st, struct ctl_stats **out);
/* The same keeping `keep` events (1..CTL_EVENTS_KEEP_MAX) instead of CTL_EVENTS_KEEP. */
int ctl_stats_open_keep(struct ctl_store *st, size_t keep, struct ctl_stats **out);
void ctl_stats_free(struct ctl_stats *s);
/* The event with this seq still kept, or NULL. */
const struct ctl_event *ctl_stats_event_get(const struct ctl_stats *s, uint64_t seq);
/* How many blocked connections' captures to keep (0: none are stored). */
void ctl_stats_captures_keep(struct ctl_stats *s, size_t keep);

/* Fold one STATS from the worker process `instance` (ctl_sup_info.instance: a new value means a
 * new process, counting from zero). svcs names the events' services (borrowed, may be empty).
 * Returns 0 or -ENOMEM (counts already folded stay). */
int ctl_stats_ingest(struct ctl_stats *s, uint64_t instance, const struct fgx_dp_stats *m,
                     const struct ctl_service *svcs, size_t nsvcs);
/* The same for the proxy worker's STATS (instance: its supervisor's): its counters are kept
 * apart from the nfq worker's while they grow, and added to the same totals, events and seq.
 * Its own numbers go to ctl_stats_px_worker(). */
int ctl_stats_ingest_proxy(struct ctl_stats *s, uint64_t instance, const struct fgx_dp_stats *m,
                           const struct ctl_service *svcs, size_t nsvcs);
/* The worker is gone: nothing is flowing through it, and its own numbers are void. */
void ctl_stats_worker_down(struct ctl_stats *s);
void ctl_stats_px_worker_down(struct ctl_stats *s);

/* Write to LMDB what changed: events at once, counters when force or CTL_STATS_FLUSH_MS have
 * passed since the last write. Totals of services and filters no longer in the store are
 * forgotten. now_ms is a monotonic clock. */
/* A script call's failure as an event (the log entry le of kind "timeout" or "exception";
 * filter 0; the call's connection when le carries it, client to server, else no addresses),
 * numbered and kept as a worker's event; service: its name or NULL. */
void ctl_stats_event_script(struct ctl_stats *s, uint64_t time_ns,
                            const struct fgx_dp_script_log *le, const char *service);
int ctl_stats_flush(struct ctl_stats *s, struct ctl_store *st, uint64_t now_ms, bool force);

/* The configuration was replaced (import): every service and filter counts from zero again,
 * whatever its id, and the stored totals are overwritten at the next flush. */
void ctl_stats_counters_reset(struct ctl_stats *s);

/* Totals of one service (all 0 when never counted). */
void ctl_stats_service(const struct ctl_stats *s, uint32_t service_id,
                       struct ctl_svc_counters *out);
uint64_t ctl_stats_blocked(const struct ctl_stats *s, uint32_t filter_id);
/* An import or undo committed: filter_id's total (or service_id's traffic totals) is v from now
 * on, whatever was counted under that id before. Returns 0 or -ENOMEM. */
int ctl_stats_blocked_set(struct ctl_stats *s, uint32_t filter_id, uint64_t v);
/* filter_id belongs to service_id: so that its last blocks still count in its service's
 * per-minute rate (ctl_rates.h) when it is removed before they are written. */
void ctl_stats_filter_service(struct ctl_stats *s, uint32_t filter_id, uint32_t service_id);
int ctl_stats_service_set(struct ctl_stats *s, uint32_t service_id, const struct ctl_svc_totals *v);
/* A log filter's matches, total (0 when never counted). */
uint64_t ctl_stats_matched(const struct ctl_stats *s, uint32_t filter_id);
/* The nfq worker's and the proxy worker's own numbers. Compare instance with the supervisor's
 * before showing them: they belong to the process that sent them. */
const struct ctl_worker_counters *ctl_stats_worker(const struct ctl_stats *s);
const struct ctl_worker_counters *ctl_stats_px_worker(const struct ctl_stats *s);

/* Events with seq > after_seq, of service_id only unless it is 0, or also those reported under
 * the name `service` when it is not NULL: the newest `limit`, oldest first. out[] must hold
 * `limit` pointers; they point into s and stay valid until the next ingest. Returns the count. */
size_t ctl_stats_events(const struct ctl_stats *s, uint64_t after_seq, uint32_t service_id,
                        const char *service, size_t limit, const struct ctl_event **out);
/* The captures waiting to be written are given up (a stop on a full disk: the events come
 * first). Returns how many. */
size_t ctl_stats_captures_drop(struct ctl_stats *s);
/* How many of them are in memory only (not written yet: the store refused). */
size_t ctl_stats_events_unsaved(const struct ctl_stats *s);
/* How many events are kept now (in memory, the newest). */
size_t ctl_stats_events_kept(const struct ctl_stats *s);
/* The newest seq assigned (0 before the first event). */
uint64_t ctl_stats_last_seq(const struct ctl_stats *s);
/* Blocks whose event was lost (a worker's queue was full), totals across restarts: of service_id,
 * or of every service (and events a worker sent malformed) when it is 0. The events and stats
 * replies carry it (control.proto Reply.events_lost, ServiceStats.events_lost). */
uint64_t ctl_stats_events_lost(const struct ctl_stats *s, uint32_t service_id);
/* Whether a report since the previous call brought a burst of events (CTL_EVENTS_BURST): then
 * more are likely waiting in the workers' queues and they are asked again soon. */
bool ctl_stats_events_burst(struct ctl_stats *s);

#endif
