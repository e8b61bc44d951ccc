/* Logging for every fgex process: one line per event on stderr (journald or the terminal),
 * "time prog[pid] level: message". Data-path code uses counters, and fgx_log_ratelimited(). */
#ifndef FGX_LOG_H
#define FGX_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum fgx_log_level {
    FGX_LOG_ERROR = 0,
    FGX_LOG_WARN = 1,
    FGX_LOG_INFO = 2,
    FGX_LOG_DEBUG = 3,
};

/* prog is borrowed and must outlive the process (a string literal or argv[0]). */
void fgx_log_init(const char *prog, enum fgx_log_level level);
void fgx_log_level_set(enum fgx_log_level level);
enum fgx_log_level fgx_log_level_get(void);
/* "error", "warn", "info", "debug" -> level. Returns 0, or -EINVAL. */
int fgx_log_level_parse(const char *name, enum fgx_log_level *out);

void fgx_log(enum fgx_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Rate-limited variant for the data path: at most one line per *last_ns window of 1 s per call
 * site (pass a static uint64_t owned by the caller's thread). Returns true when it logged. */
bool fgx_log_ratelimited(unsigned long long *last_ns, enum fgx_log_level level, const char *fmt,
                         ...) __attribute__((format(printf, 3, 4)));

#define fgx_err(...) fgx_log(FGX_LOG_ERROR, __VA_ARGS__)
#define fgx_warn(...) fgx_log(FGX_LOG_WARN, __VA_ARGS__)
#define fgx_info(...) fgx_log(FGX_LOG_INFO, __VA_ARGS__)
#define fgx_debug(...) fgx_log(FGX_LOG_DEBUG, __VA_ARGS__)

/* An error's text for the caller (printf format into err, at most errlen bytes with its NUL),
 * the reason a parser or a check gives back; err NULL or errlen 0: nothing is written. */
void fgx_err_set(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
