/* controld supervision stage: spawns a worker (the nfq worker, or the proxy worker) beside
 * controld's own binary, reaps and restarts it with backoff, and carries rulesets and statistics
 * requests to it over the data-path channel (fgx/dp.h) on ipc://RUN_DIR/nfq.sock (proxy.sock).
 * One struct ctl_sup per worker. */
#ifndef CTL_SUPERVISE_H
#define CTL_SUPERVISE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "fgx/dp.h"

struct ctl_sup_config {
    const char *run_dir;     /* borrowed */
    const char *worker_path; /* borrowed; NULL: "nfqworker" beside /proc/self/exe */
    const char *log_level;   /* borrowed; passed on as --log-level */
    unsigned threads;
    unsigned queue_base;
    /* Non-zero: supervise proxyworker instead (worker_path NULL: "proxyworker"), listening on
     * this port for the tproxy rules, on ipc://RUN_DIR/proxy.sock; queue_base is unused. */
    unsigned proxy_port;
    unsigned max_conns; /* proxyworker --max-conns; 0: its default */
    /* proxyworker --max-conns-per-src and --first-byte-timeout (seconds) when set (0 is a
     * value: no limit, no timeout) */
    bool has_max_per_src, has_first_byte;
    unsigned max_per_src, first_byte_s;
    bool no_synack_log;        /* nfqworker --no-synack-log (the rules queue SYNs, ctl_nft.h) */
    unsigned nfq_flows;        /* nfqworker --flows (per thread); 0: its default */
    unsigned nfq_script_flows; /* nfqworker --script-flows (per thread); 0: its default */
    unsigned udp_idle_s;       /* both workers' --udp-idle (a UDP flow's); 0: their default */
};

struct ctl_sup_info {
    pid_t pid;           /* 0 when no worker runs */
    /* "running", "starting", "replacing" (killed as hung) or "down" (static strings) */
    const char *state;
    uint64_t generation; /* last generation the worker acknowledged */
    uint32_t restarts;
    uint64_t instance; /* changes each time a new worker process is spawned */
    uint64_t started;  /* unix seconds the current process was spawned; 0 when none runs */
    int64_t hb_age_ms; /* since its last heartbeat answer; -1: none yet (or none runs) */
    bool adopted;      /* taken over from an earlier controld (not controld's child) */
    const char *replaced_why; /* why the last one was replaced as hung ("" never; borrowed) */
};

struct ctl_sup;

/* Listen on the worker channel and spawn the first worker, or adopt the one an earlier
 * controld left running (RUN_DIR/NAME.pid) when it answers there within 3 s. The config is
 * copied. */
int ctl_sup_start(const struct ctl_sup_config *cfg, struct ctl_sup **out);
/* Periodic work: reap a dead worker, restart it once its backoff has passed; heartbeats (a
 * worker that misses one for 1 s, or one of whose data-path threads has not moved for 1 s, is
 * killed and replaced, with a health note saying why). *respawned is set when a new worker
 * was started: it needs the full ruleset. Never blocks. */
int ctl_sup_poll(struct ctl_sup *s, bool *respawned);
/* Push a ruleset and wait for the worker's ACK of its generation until deadline_ms
 * (CLOCK_MONOTONIC, in ms; every call of the push shares it, with a floor of 100 ms each so a
 * worker that answers at once is heard after another took the time). Returns 0, -ETIMEDOUT,
 * -ENOTCONN at once when no worker runs, or -EPROTO when the worker refused it (its reason
 * logged). */
int ctl_sup_push(struct ctl_sup *s, const struct fgx_dp_ruleset *rs, uint64_t deadline_ms);
/* The CLOCK_MONOTONIC time in ms that ctl_sup_push's deadline is on. */
uint64_t ctl_sup_now_ms(void);
/* Ask for statistics; on success *out is a FGX_DP_STATS message to fgx_dp_msg_release().
 * -ENOTCONN at once when no worker is connected. */
int ctl_sup_stats(struct ctl_sup *s, int timeout_ms, struct fgx_dp_msg *out);
/* The captured connections of one service (FGX_DP_CAPTURES into *out, released by the caller);
 * -ENOTCONN when the worker is not running. */
int ctl_sup_captures(struct ctl_sup *s, uint32_t service_id, int timeout_ms,
                     struct fgx_dp_msg *out);
void ctl_sup_info(const struct ctl_sup *s, struct ctl_sup_info *out);
/* Ask the worker to stop (SIGTERM; SIGKILL after 2 s) and restart it as soon as it is reaped,
 * without backoff: a requested restart is no crash. A worker that does not answer a heartbeat
 * within 1 s is killed at once instead (SIGKILL: hung, it hands nothing over). ctl_sup_poll()
 * does the rest; a worker that is down is restarted at the next poll. */
int ctl_sup_restart(struct ctl_sup *s);
/* Send the worker SIGTERM now, so that the stops of several workers run side by side and
 * controld's own stop waits for the slowest, not their sum. NULL: no-op. */
void ctl_sup_stop_begin(struct ctl_sup *s);
/* Stop the worker (SIGTERM, then SIGKILL after 2 s more), adopted or not, close
 * the channel, free. NULL: no-op. */
void ctl_sup_stop(struct ctl_sup *s);

#endif
