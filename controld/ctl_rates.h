/* controld statistics stage, hit rates over time: blocks (and, once filters can log, matches)
 * per minute, per filter and per service, for the last CTL_RATES_MINUTES minutes, kept in
 * LMDB so they survive restarts; and each service's traffic (bytes each way, connections) per
 * minute the same way. A series is one record of (minute, count) pairs for the minutes that had
 * any, oldest first: a filter that fired once costs 8 bytes, one firing every minute for two
 * days 23 KiB (a service's bytes of one direction, every minute: 34 KiB). ctl_stats notes growth as
 * it folds worker reports and writes it with its counters (CTL_STATS_FLUSH_MS). */
#ifndef CTL_RATES_H
#define CTL_RATES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld/ctl_store.h"

#define CTL_RATES_MINUTES 2880 /* 48 hours */

enum ctl_rate_kind {
    CTL_RATE_BLOCKED = 'B',
    /* Log-only filters' matches: the logfil branch adds a `matched` counter to the worker
     * reports; its growth is noted with ctl_rates_note(..., CTL_RATE_MATCHED, ...) where
     * ctl_stats.c folds `blocked` (see fold()), and everything below already carries it. */
    CTL_RATE_MATCHED = 'M',
    /* A service's traffic (services only, noted with ctl_rates_note_service()): bytes each way
     * and connections seen. Bytes count in 64 bits (12-byte points: a busy minute passes
     * 4 GiB); these series are written once their minute is over (or when forced), not at
     * every flush, so a steady service rewrites each of its records once a minute. */
    CTL_RATE_BYTES_C2S = 'I',
    CTL_RATE_BYTES_S2C = 'O',
    CTL_RATE_FLOWS = 'N',
};

/* A traffic kind (a service's, written per minute): CTL_RATE_BYTES_*, CTL_RATE_FLOWS. */
static inline int ctl_rates_traffic(enum ctl_rate_kind k)
{
    return k == CTL_RATE_BYTES_C2S || k == CTL_RATE_BYTES_S2C || k == CTL_RATE_FLOWS;
}

/* The record bytes of one point: 4 (minute) + 4 (count), or + 8 for the byte kinds. */
static inline size_t ctl_rates_point_len(enum ctl_rate_kind k)
{
    return k == CTL_RATE_BYTES_C2S || k == CTL_RATE_BYTES_S2C ? 12 : 8;
}

enum ctl_rate_obj { CTL_RATE_FILTER = 'f', CTL_RATE_SERVICE = 's' };

/* One point of a series. */
struct ctl_rate_point {
    uint32_t minute; /* unix time / 60 */
    uint64_t count;  /* below 2^32 but for the byte kinds */
};

/* Pending growth, not yet in LMDB: a few entries per flush period. */
struct ctl_rates_pending {
    struct ctl_rates_entry {
        uint8_t kind;
        /* service_id 0: found from the store at the flush; filter_id 0: a service's traffic */
        uint32_t filter_id, service_id;
        uint32_t minute;
        uint64_t count;
    } * v;
    size_t n, cap;
};

void ctl_rates_key(uint8_t key[CTL_RATES_KEY_LEN], enum ctl_rate_kind kind, enum ctl_rate_obj obj,
                   uint32_t id);

/* Decode a record of kind's points into points (*out malloc'd, free(); n may be 0). -EINVAL
 * when corrupt. */
int ctl_rates_decode(enum ctl_rate_kind kind, const void *rec, size_t len,
                     struct ctl_rate_point **out, size_t *n);
/* Add count at minute to a series' points (kept ascending), drop what is older than
 * now_minute - CTL_RATES_MINUTES, and encode: *rec malloc'd (free()), *len may be 0 (empty).
 * A minute's count saturates (UINT32_MAX, UINT64_MAX for the byte kinds). Pure: the unit
 * tests' view of the format. */
int ctl_rates_merge(enum ctl_rate_kind kind, const void *rec, size_t len, uint32_t minute,
                    uint64_t count, uint32_t now_minute, void **out, size_t *outlen);

/* Note growth of a filter's counter (service_id 0 when not known here). -ENOMEM only. */
int ctl_rates_note(struct ctl_rates_pending *p, enum ctl_rate_kind kind, uint32_t filter_id,
                   uint32_t service_id, uint32_t minute, uint64_t count);
/* Note growth of a service's traffic (kind: ctl_rates_traffic()). -ENOMEM only. */
int ctl_rates_note_service(struct ctl_rates_pending *p, enum ctl_rate_kind kind,
                           uint32_t service_id, uint32_t minute, uint64_t count);
/* Write what is pending into t, per filter and per its service; service ids not noted come
 * from the filter's record, else from svc_of (a removed filter's last known service; may
 * return 0). Traffic of minute now_minute (still growing) stays pending unless all. Clears
 * what it wrote from p on success. */
int ctl_rates_flush(struct ctl_rates_pending *p, struct ctl_txn *t, uint32_t now_minute, bool all,
                    uint32_t (*svc_of)(void *arg, uint32_t filter_id), void *arg);
/* Delete the series whose newest point is older than the window. */
int ctl_rates_prune(struct ctl_txn *t, uint32_t now_minute);
/* One series' points at or after since_minute (*out malloc'd; NULL, 0 when none). */
int ctl_rates_get(struct ctl_txn *t, enum ctl_rate_kind kind, enum ctl_rate_obj obj, uint32_t id,
                  uint32_t since_minute, struct ctl_rate_point **out, size_t *n);
void ctl_rates_pending_release(struct ctl_rates_pending *p);

#endif
