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

/* Whether a and b match the same bytes: the same regex bytes, direction and case, whatever
 * they do on a match (block or log) and whatever their labels. What a sync, a --replace and a
 * config import keep a filter by (its id and counters stay; its action or label is a change),
 * so that switching a line of a ruleset file to log does not make a new filter of it. */
bool ctl_filter_same_pattern(const struct ctl_filter *a, const struct ctl_filter *b);

/* Map want[] (a file's filters) onto cur[] (a service's): match[i] is the index in cur of the
 * filter want[i] is the same as (ctl_filter_same_pattern() when by_pattern, else
 * ctl_filter_same()), or -1 (to add); kept[j] says whether cur[j] was matched (else it goes).
 * Each cur filter matches at most one want line. Returns 0, or -EEXIST when two lines of want
 * are the same by that test: *dup_a < *dup_b are their indexes. */
int ctl_diff_filters(const struct ctl_filter *cur, size_t ncur, const struct ctl_filter *want,
                     size_t nwant, bool by_pattern, long *match, bool *kept, size_t *dup_a,
                     size_t *dup_b);

/* What differs between two versions of one filter (a and b the same by
 * ctl_filter_same_pattern()), in words ("action block -> log, label 'x' -> none, disabled"),
 * into buf; "" when nothing does. The enabled state is compared only when with_active. */
void ctl_diff_filter(const struct ctl_filter *a, const struct ctl_filter *b, bool with_active,
                     char *buf, size_t len);

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
    bool log;    /* filters: the log action (else block) */
    char *label; /* filters: malloc'd, owned by the diff; NULL for none */
    uint64_t blocked;
    char what[160]; /* CTL_DIFF_CHANGE: what differs */
};

struct ctl_diff {
    struct ctl_diff_line *v;
    size_t n, cap;
};

/* Append a copy of l (its regex and label copied too). Returns 0 or -ENOMEM. */
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
