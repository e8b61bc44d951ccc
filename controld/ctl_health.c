/* controld's health log (ctl_health.h): a mutex-guarded ring of entries. The ring is small and
 * noted to rarely (a few entries a minute in a bad game), so one lock is plenty. */
#include "controld/ctl_health.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fgx/log.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct ctl_health_entry ring[CTL_HEALTH_RING];
static uint64_t last_seq; /* ring[(seq - 1) % CTL_HEALTH_RING] holds seq */

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ctl_health_note(uint32_t service_id, enum ctl_health_level level, const char *kind,
                     uint64_t count, const char *fmt, ...)
{
    struct ctl_health_entry e = {.time_ns = now_ns(), .service_id = service_id,
                                 .level = level, .count = count};
    va_list ap;

    snprintf(e.kind, sizeof(e.kind), "%s", kind);
    va_start(ap, fmt);
    vsnprintf(e.text, sizeof(e.text), fmt, ap);
    va_end(ap);

    pthread_mutex_lock(&lock);
    e.seq = ++last_seq;
    ring[(e.seq - 1) % CTL_HEALTH_RING] = e;
    pthread_mutex_unlock(&lock);

    fgx_log(level == CTL_HEALTH_ERROR  ? FGX_LOG_ERROR
            : level == CTL_HEALTH_WARN ? FGX_LOG_WARN
                                       : FGX_LOG_INFO,
            "health: service %u %s: %s", service_id, e.kind, e.text);
}

size_t ctl_health_list(uint64_t after_seq, uint32_t service_id, struct ctl_health_entry *out,
                       size_t max)
{
    size_t n = 0;
    uint64_t first, seq;

    pthread_mutex_lock(&lock);
    first = last_seq > CTL_HEALTH_RING ? last_seq - CTL_HEALTH_RING + 1 : 1;
    seq = after_seq + 1 > first ? after_seq + 1 : first;
    for (; seq <= last_seq && n < max; seq++) {
        const struct ctl_health_entry *e = &ring[(seq - 1) % CTL_HEALTH_RING];

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

void ctl_health_reset(void)
{
    pthread_mutex_lock(&lock);
    last_seq = 0;
    memset(ring, 0, sizeof(ring));
    pthread_mutex_unlock(&lock);
}
