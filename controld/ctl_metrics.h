/* controld metrics stage: serves the statistics in the Prometheus text exposition format
 * (version 0.0.4) on GET /metrics, from a thread of its own. The control loop renders a
 * snapshot after each statistics refresh and publishes it; the thread only copies the latest
 * snapshot under a mutex, so a slow or stuck scraper never blocks the control loop. */
#ifndef CTL_METRICS_H
#define CTL_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld/ctl_apply.h"
#include "controld/ctl_stats.h"
#include "controld/ctl_store.h"

struct ctl_metrics_worker {
    const char *kind; /* borrowed: "nfq" or "proxy" */
    bool up;
    uint32_t restarts;
    uint64_t rss_bytes, flows;
    /* proxy: connections it reset itself since it started (has_own: it reported them) */
    bool has_own;
    uint64_t conns_refused, unclassified, connect_failed, scan_errors;
    uint64_t src_refused, evicted, silent_closed, midstream_reset, midstream_rescan;
};

/* Render the exposition text for these services and filters (borrowed). stats may be NULL
 * (every counter 0). *out is malloc'd and owned by the caller. Returns 0 or -ENOMEM. */
int ctl_metrics_render(const struct ctl_service *svcs, size_t nsvcs, const struct ctl_filter *flts,
                       size_t nflts, const struct ctl_stats *stats,
                       const struct ctl_metrics_worker *workers, size_t nworkers, char **out,
                       size_t *len);

struct ctl_metrics;

/* Listen on "ADDR:PORT" ("127.0.0.1:9100", "[::1]:9100", ":9100" for every address; PORT 0
 * picks a free one, see ctl_metrics_port()) and start serving plain HTTP there (libmicrohttpd);
 * addr NULL: no listener, only the snapshot (for the web listener's /metrics). *out owned by
 * the caller (ctl_metrics_stop()). Returns 0, -EINVAL for a bad address, or the socket error. */
int ctl_metrics_start(const char *addr, struct ctl_metrics **out);
/* A copy of the latest snapshot (malloc'd; "fgex_up 1" before the first): 0 or -ENOMEM.
 * Thread-safe. */
int ctl_metrics_text(struct ctl_metrics *m, char **text, size_t *len);

/* The port actually bound. */
uint16_t ctl_metrics_port(const struct ctl_metrics *m);
/* Serve text (malloc'd; ownership passes to m) from now on. */
void ctl_metrics_publish(struct ctl_metrics *m, char *text, size_t len);
/* Render what ctx knows now and publish it. */
int ctl_metrics_update(struct ctl_metrics *m, struct ctl_ctx *ctx);
/* Stop the thread, close the socket, free. NULL is a no-op. */
void ctl_metrics_stop(struct ctl_metrics *m);

#endif
