/* controld configuration stage, its pure part: when two filters are the same filter (one
 * identity function, what sync, imports, undo and the duplicate refusal all use), how a
 * service's filters map onto a file's, and the diff an import reports. No store, no I/O. */
#ifndef CTL_DIFF_H
#define CTL_DIFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld/ctl_store.h"

/* Whether a and b are the same filter whatever their ids, services and enabled states: the same
 * regex bytes, direction and case. The one identity of a filter; a new property that changes
 * what a filter does (its action, block or log) is compared here too. */
bool ctl_filter_same(const struct ctl_filter *a, const struct ctl_filter *b);

/* Map want[] (a file's filters) onto cur[] (a service's): match[i] is the index in cur of the
 * filter want[i] is identical to, or -1 (to add); kept[j] says whether cur[j] was matched (else
 * it goes). Each cur filter matches at most one want line. Returns 0, or -EEXIST when two lines
 * of want are identical: *dup_a < *dup_b are their indexes. */
int ctl_diff_filters(const struct ctl_filter *cur, size_t ncur, const struct ctl_filter *want,
                     size_t nwant, long *match, bool *kept, size_t *dup_a, size_t *dup_b);

/* The first filter of fs[] (n) identical to f, other than f->id itself: its index, or -1. */
long ctl_diff_find_same(const struct ctl_filter *fs, size_t n, const struct ctl_filter *f);

enum ctl_diff_op { CTL_DIFF_ADD, CTL_DIFF_RM, CTL_DIFF_KEEP, CTL_DIFF_CHANGE };

/* One line of an import's diff (control.proto DiffEntry). */
struct ctl_diff_line {
    enum ctl_diff_op op;
    bool filter; /* else a service */
    uint32_t id; /* 0: not allocated yet */
    char service[CTL_NAME_MAX + 1];
    char *regex; /* filters: malloc'd, owned by the diff */
    enum fgx_dir dir;
    bool nocase, active;
    uint64_t blocked;
    char what[160]; /* services, CTL_DIFF_CHANGE: what differs */
};

struct ctl_diff {
    struct ctl_diff_line *v;
    size_t n, cap;
};

/* Append a copy of l (its regex copied too). Returns 0 or -ENOMEM. */
int ctl_diff_push(struct ctl_diff *d, const struct ctl_diff_line *l);
/* How many lines change something (all but CTL_DIFF_KEEP). */
size_t ctl_diff_changes(const struct ctl_diff *d);
void ctl_diff_release(struct ctl_diff *d);
const char *ctl_diff_op_name(enum ctl_diff_op op);

/* What differs between two versions of a service, in words ("port 80 -> 8080, stopped"), into
 * buf; "" when nothing does. */
void ctl_diff_service(const struct ctl_service *a, const struct ctl_service *b, char *buf,
                      size_t len);

#endif
