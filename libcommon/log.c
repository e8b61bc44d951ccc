/* Logging: one line per event on stderr, "2026-11-30T03:40:00.123Z prog[pid] level: msg". */
#include "fgx/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static const char *log_prog = "fgex";
static enum fgx_log_level log_level = FGX_LOG_INFO;
static const char *const level_names[] = {"error", "warn", "info", "debug"};

void fgx_log_init(const char *prog, enum fgx_log_level level)
{
    const char *slash = prog ? strrchr(prog, '/') : NULL;

    log_prog = slash ? slash + 1 : (prog ? prog : "fgex");
    log_level = level;
}

void fgx_log_level_set(enum fgx_log_level level)
{
    __atomic_store_n(&log_level, level, __ATOMIC_RELAXED);
}

enum fgx_log_level fgx_log_level_get(void)
{
    return __atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

int fgx_log_level_parse(const char *name, enum fgx_log_level *out)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (name && strcasecmp(name, level_names[i]) == 0) {
            *out = (enum fgx_log_level)i;
            return 0;
        }
    }
    if (name && strcasecmp(name, "warning") == 0) {
        *out = FGX_LOG_WARN;
        return 0;
    }
    return -EINVAL;
}

__attribute__((format(printf, 2, 0)))
static void log_v(enum fgx_log_level level, const char *fmt, va_list ap)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    int n;

    /* One write per line, so lines from several threads and processes never interleave. */
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s: ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 ts.tv_nsec / 1000000, log_prog, (int)getpid(), level_names[level]);
    if (n < 0 || (size_t)n >= sizeof(line))
        n = 0;
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    if (m < 0)
        m = 0;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w; /* nowhere left to report a failed log write */
}

void fgx_log(enum fgx_log_level level, const char *fmt, ...)
{
    va_list ap;

    if (level > fgx_log_level_get())
        return;
    va_start(ap, fmt);
    log_v(level, fmt, ap);
    va_end(ap);
}

bool fgx_log_ratelimited(unsigned long long *last_ns, enum fgx_log_level level, const char *fmt,
                         ...)
{
    struct timespec ts;
    unsigned long long now;
    va_list ap;

    if (level > fgx_log_level_get())
        return false;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    now = (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
    if (*last_ns && now - *last_ns < 1000000000ULL)
        return false;
    *last_ns = now;
    va_start(ap, fmt);
    log_v(level, fmt, ap);
    va_end(ap);
    return true;
}

void fgx_err_set(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    (void)vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}
