/* controld change history: every change to services and filters is recorded in LMDB with who
 * made it, the request in words, and the configuration before it (services and filters with
 * their ids and counters, as the store holds them). An undo applies such a snapshot through the
 * import path (ctl_config_import_ex(), counters kept), in one transaction with its own record,
 * so an undo is itself a change: hot-swapped, recorded, and revertible (redo). */
#ifndef CTL_HISTORY_H
#define CTL_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control.pb-c.h"
#include "controld/ctl_stats.h"
#include "controld/ctl_store.h"

/* Changes kept by default (controld --history-keep); the oldest go first. */
#define CTL_HISTORY_KEEP 500
#define CTL_HISTORY_KEEP_MAX 100000

/* A setting (passwd, auth on|off) is recorded without a snapshot: undo passes over it. */
enum ctl_hist_kind {
    CTL_HIST_CHANGE = 0,
    CTL_HIST_UNDO = 1,
    CTL_HIST_REDO = 2,
    CTL_HIST_SETTING = 3
};

/* What the undo walk needs of an entry. reverted: a change undone (and not redone since), or an
 * undo redone. */
struct ctl_hist_meta {
    uint64_t seq;
    enum ctl_hist_kind kind;
    uint64_t target;
    bool reverted;
};

/* Of v[] (n, oldest first), the index of what `undo` reverts: the newest change not reverted.
 * -1 when none. */
long ctl_history_undo_pick(const struct ctl_hist_meta *v, size_t n);
/* The index of what `redo` reverts: the newest undo not reverted, if no change was made after
 * it. -1 when none. */
long ctl_history_redo_pick(const struct ctl_hist_meta *v, size_t n);

/* The configuration of t packed as a Config, with counters: each filter's blocked (stats' live
 * total when stats is not NULL, else the saved one), each service's blocked_removed and traffic
 * totals. *buf malloc'd (free()). stats also learns each filter's service
 * (ctl_stats_filter_service()), taken before every change. */
int ctl_history_snapshot(struct ctl_txn *t, struct ctl_stats *stats, uint8_t **buf, size_t *len);
/* The same without counters: what compares two configurations. */
int ctl_history_plain(struct ctl_txn *t, uint8_t **buf, size_t *len);

/* Record one change in t: the next seq, now, and the snapshot before it; then keep the newest
 * `keep` entries. *seq_out (may be NULL) gets its seq. */
int ctl_history_record(struct ctl_txn *t, enum ctl_hist_kind kind, uint64_t target, const char *who,
                       const char *what, const uint8_t *before, size_t blen, size_t keep,
                       uint64_t *seq_out);
/* Every entry's meta, oldest first (*out malloc'd, free()). */
int ctl_history_metas(struct ctl_txn *t, struct ctl_hist_meta **out, size_t *n);
/* One entry, unpacked (fgx__ctl__change__free_unpacked()). */
int ctl_history_get(struct ctl_txn *t, uint64_t seq, Fgx__Ctl__Change **out);
/* Set an entry's reverted mark. */
int ctl_history_mark(struct ctl_txn *t, uint64_t seq, bool reverted);

/* The request in words ("filter rm 3", "service add web tcp/80"), into buf. */
void ctl_history_describe(const Fgx__Ctl__Request *q, char *buf, size_t len);
/* The command of a request kind (Request's oneof member number): "script set"; NULL when the
 * table lacks it (a new request kind nobody named). */
const char *ctl_history_req_name(int req_case);

#endif
