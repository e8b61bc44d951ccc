/* controld's health log (ctl_health.h): a mutex-guarded ring of entries in the order they were
 * noted (seqs may have gaps: the store keeps a bounded number per service, so the entries loaded
 * at start are not contiguous). The ring is small and noted to rarely (a few entries a minute
 * in a bad game), so one lock is plenty; a list walks it whole. Counters that rise (ctl_stats)
 * are added up per service and kind so that a flood of refusals is one entry every few
 * seconds, with its count, not one per report. */
#include "controld/ctl_health.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fgx/log.h"

/* Service-and-kind slots for the counts added up; the least recently noted is reused. */
#define HEALTH_COUNT_SLOTS 64
#define HEALTH_WHAT_MAX 160

struct health_count {
    uint32_t service_id;
    enum ctl_health_level level;
    char kind[CTL_HEALTH_KIND_MAX];
    char what[HEALTH_WHAT_MAX];
    uint64_t pending;  /* counted since the last entry, not noted yet */
    uint64_t since_ms; /* when pending started (0: nothing pending) */
    uint64_t noted_ms; /* the last entry (0: none yet) */
    bool used;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct ctl_health_entry ring[CTL_HEALTH_RING];
static size_t head, count; /* ring[head] is the oldest of count entries */
static uint64_t last_seq;  /* the newest seq given */
static uint64_t saved_seq; /* entries up to it are in the store */
static struct health_count counts[HEALTH_COUNT_SLOTS];

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t ctl_health_mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

/* Under the lock. */
static void ring_push(const struct ctl_health_entry *e)
{
    if (count < CTL_HEALTH_RING) {
        ring[(head + count) % CTL_HEALTH_RING] = *e;
        count++;
    } else {
        ring[head] = *e;
        head = (head + 1) % CTL_HEALTH_RING;
    }
}

static const struct ctl_health_entry *ring_at(size_t i)
{
    return &ring[(head + i) % CTL_HEALTH_RING];
}

static void health_vnote(uint32_t service_id, enum ctl_health_level level, const char *kind,
                         uint64_t cnt, const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));

static void health_vnote(uint32_t service_id, enum ctl_health_level level, const char *kind,
                         uint64_t cnt, const char *fmt, va_list ap)
{
    struct ctl_health_entry e = {
        .time_ns = now_ns(), .service_id = service_id, .level = level, .count = cnt};

    snprintf(e.kind, sizeof(e.kind), "%s", kind);
    vsnprintf(e.text, sizeof(e.text), fmt, ap);

    pthread_mutex_lock(&lock);
    e.seq = ++last_seq;
    ring_push(&e);
    pthread_mutex_unlock(&lock);

    fgx_log(level == CTL_HEALTH_ERROR  ? FGX_LOG_ERROR
            : level == CTL_HEALTH_WARN ? FGX_LOG_WARN
                                       : FGX_LOG_INFO,
            "health: service %u %s: %s", service_id, e.kind, e.text);
}

void ctl_health_note(uint32_t service_id, enum ctl_health_level level, const char *kind,
                     uint64_t cnt, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    health_vnote(service_id, level, kind, cnt, fmt, ap);
    va_end(ap);
}

size_t ctl_health_list(uint64_t after_seq, uint32_t service_id, struct ctl_health_entry *out,
                       size_t max)
{
    size_t n = 0;

    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < count && n < max; i++) {
        const struct ctl_health_entry *e = ring_at(i);

        if (e->seq <= after_seq)
            continue;
        if (service_id != UINT32_MAX && e->service_id != 0 && e->service_id != service_id)
            continue;
        out[n++] = *e;
    }
    pthread_mutex_unlock(&lock);
    return n;
}

uint64_t ctl_health_last_seq(void)
{
    uint64_t s;

    pthread_mutex_lock(&lock);
    s = last_seq;
    pthread_mutex_unlock(&lock);
    return s;
}

static const char *const level_names[] = {"info", "warn", "error"};

const char *ctl_health_level_name(enum ctl_health_level level)
{
    return level_names[level <= CTL_HEALTH_ERROR ? level : CTL_HEALTH_ERROR];
}

enum ctl_health_level ctl_health_level_of(const char *name)
{
    for (int i = 0; name && i < 3; i++)
        if (strcmp(name, level_names[i]) == 0)
            return (enum ctl_health_level)i;
    return CTL_HEALTH_INFO;
}

void ctl_health_reset(void)
{
    pthread_mutex_lock(&lock);
    last_seq = saved_seq = 0;
    head = count = 0;
    memset(ring, 0, sizeof(ring));
    memset(counts, 0, sizeof(counts));
    pthread_mutex_unlock(&lock);
}

void ctl_health_restore(const struct ctl_health_entry *stored, size_t n)
{
    struct ctl_health_entry *early;
    size_t nearly;
    uint64_t base;

    pthread_mutex_lock(&lock);
    nearly = count;
    early = nearly ? malloc(nearly * sizeof(*early)) : NULL;
    if (nearly && !early) {
        /* Keep what was noted since start rather than the stored: it is the news. */
        pthread_mutex_unlock(&lock);
        fgx_err("health log: out of memory: the stored entries are not shown");
        return;
    }
    for (size_t i = 0; i < nearly; i++)
        early[i] = *ring_at(i);
    head = count = 0;
    base = 0;
    /* The newest CTL_HEALTH_RING - nearly stored ones fit beside what was noted early. */
    for (size_t i = n > CTL_HEALTH_RING - nearly ? n - (CTL_HEALTH_RING - nearly) : 0; i < n; i++) {
        ring_push(&stored[i]);
    }
    for (size_t i = 0; i < n; i++)
        if (stored[i].seq > base)
            base = stored[i].seq;
    saved_seq = base;
    for (size_t i = 0; i < nearly; i++) {
        early[i].seq = ++base;
        ring_push(&early[i]);
    }
    last_seq = base;
    pthread_mutex_unlock(&lock);
    free(early);
}

size_t ctl_health_unsaved(struct ctl_health_entry *out, size_t max)
{
    size_t n = 0;

    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < count && n < max; i++)
        if (ring_at(i)->seq > saved_seq)
            out[n++] = *ring_at(i);
    pthread_mutex_unlock(&lock);
    return n;
}

void ctl_health_saved(uint64_t seq)
{
    pthread_mutex_lock(&lock);
    if (seq > saved_seq)
        saved_seq = seq;
    pthread_mutex_unlock(&lock);
}

/* ---- counts added up ---- */

/* Under the lock: the slot of (service_id, kind), made when absent. */
static struct health_count *count_slot(uint32_t service_id, const char *kind)
{
    struct health_count *spare = NULL, *old = NULL;

    for (size_t i = 0; i < HEALTH_COUNT_SLOTS; i++) {
        struct health_count *c = &counts[i];

        if (!c->used) {
            if (!spare)
                spare = c;
            continue;
        }
        if (c->service_id == service_id && strncmp(c->kind, kind, sizeof(c->kind) - 1) == 0)
            return c;
        /* else the one noted longest ago with nothing pending */
        if (c->pending == 0 && (!old || c->noted_ms < old->noted_ms))
            old = c;
    }
    if (!spare)
        spare = old;
    if (!spare)
        return NULL;
    memset(spare, 0, sizeof(*spare));
    spare->used = true;
    spare->service_id = service_id;
    snprintf(spare->kind, sizeof(spare->kind), "%s", kind);
    return spare;
}

/* What a due slot's entry says, taken out of the slot (under the lock). */
struct count_note {
    uint32_t service_id;
    enum ctl_health_level level;
    char kind[CTL_HEALTH_KIND_MAX];
    char what[HEALTH_WHAT_MAX];
    uint64_t n, secs;
};

static bool count_due(struct health_count *c, uint64_t now_ms, struct count_note *out)
{
    uint64_t secs;

    if (c->pending == 0 || (c->noted_ms != 0 && now_ms - c->noted_ms < CTL_HEALTH_COALESCE_MS))
        return false;
    /* Workers report every second or so: the first count rose within the last window. */
    secs = (now_ms - c->since_ms + 999) / 1000;
    if (secs < CTL_HEALTH_COALESCE_MS / 1000)
        secs = CTL_HEALTH_COALESCE_MS / 1000;
    *out = (struct count_note){
        .service_id = c->service_id, .level = c->level, .n = c->pending, .secs = secs};
    memcpy(out->kind, c->kind, sizeof(out->kind));
    memcpy(out->what, c->what, sizeof(out->what));
    c->pending = 0;
    c->since_ms = 0;
    c->noted_ms = now_ms ? now_ms : 1;
    return true;
}

static void count_emit(const struct count_note *c)
{
    ctl_health_note(c->service_id, c->level, c->kind, c->n, "%llu %s in the last %llu s",
                    (unsigned long long)c->n, c->what, (unsigned long long)c->secs);
}

void ctl_health_count(uint32_t service_id, enum ctl_health_level level, const char *kind,
                      const char *what, uint64_t delta, uint64_t now_ms)
{
    struct health_count *c;
    struct count_note due;
    bool emit = false;

    if (delta == 0)
        return;
    pthread_mutex_lock(&lock);
    c = count_slot(service_id, kind);
    if (c) {
        if (c->pending == 0)
            c->since_ms = now_ms;
        c->pending += delta;
        if (level > c->level || c->pending == delta)
            c->level = level;
        snprintf(c->what, sizeof(c->what), "%s", what);
        emit = count_due(c, now_ms, &due);
    }
    pthread_mutex_unlock(&lock);
    if (!c) {
        ctl_health_note(service_id, level, kind, delta, "%llu %s", (unsigned long long)delta, what);
        return;
    }
    if (emit)
        count_emit(&due);
}

void ctl_health_tick(uint64_t now_ms)
{
    struct count_note due[HEALTH_COUNT_SLOTS];
    size_t n = 0;

    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < HEALTH_COUNT_SLOTS; i++)
        if (counts[i].used && count_due(&counts[i], now_ms, &due[n]))
            n++;
    pthread_mutex_unlock(&lock);
    for (size_t i = 0; i < n; i++)
        count_emit(&due[i]);
}
