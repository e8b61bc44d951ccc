/* Stats stage of proxyworker: the proxy's own failure counters, the STATS fields that only the
 * proxy fills (fgx/dp.h). Read by the control thread; px.h declares the rest of the stage. */
#ifndef PX_STATS_H
#define PX_STATS_H

#include <stdint.h>

#include "px.h"

/* Connections the proxy reset itself, since it started, summed over its threads. */
struct px_own_stats {
    uint64_t conns_refused;  /* at the connection limit (--max-conns) */
    uint64_t unclassified;   /* for no running proxy-layer service */
    uint64_t connect_failed; /* the real service could not be reached */
    uint64_t scan_errors;    /* hyperscan failed on their bytes (never passed unscanned) */
    uint64_t src_refused;    /* their source had --max-conns-per-src open */
    uint64_t evicted;        /* the most idle, closed at --max-conns to make room */
    uint64_t silent_closed;  /* nothing moved within --first-byte-timeout */
    /* relayed unscanned while their service was away: reset, or scanned on afresh */
    uint64_t midstream_reset, midstream_rescan;
};

void px_stats_own(struct px_worker *w, struct px_own_stats *out);

#endif
