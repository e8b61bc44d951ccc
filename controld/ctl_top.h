/* controld's "who is attacking" view (`fgexctl events --top src`): the stored events folded into
 * blocks per source address and filter, newest first. Pure: fed the events, no store. */
#ifndef CTL_TOP_H
#define CTL_TOP_H

#include <stddef.h>
#include <stdint.h>

#include "controld/ctl_store.h"

struct ctl_top_row {
    char src[CTL_ADDR_TEXT_MAX];
    uint32_t filter_id;
    uint32_t service_id;
    char service[CTL_NAME_MAX + 1]; /* of the newest event */
    uint64_t blocks;
    uint64_t first_ns, last_ns;
    char script_fn[64]; /* a script's blocks (filter_id 0): the function; "" for a filter */
};

/* Fold evs[0..n) (any order) into rows, one per (source address, filter), or per (source
 * address, service, script function) for a script's blocks: blocks only (a log filter's events
 * and a script call's failures are not blocks), events older than since_ns left out (0: all). Rows
 * are ordered by their newest block, newest first (ties: more blocks first, then address and
 * filter). *out malloc'd (free(); NULL when no row). Returns 0 or -ENOMEM. */
int ctl_top_src(const struct ctl_event *const *evs, size_t n, uint64_t since_ns,
                struct ctl_top_row **out, size_t *nout);

#endif
