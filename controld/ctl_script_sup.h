/* controld, the script worker's supervision (issue 16): scriptworker runs always, as the
 * proxy worker does, so that a service can get a script at any time; it is started, watched
 * (a heartbeat on its own socket, issue 24) and restarted here (with a back-off). A clean stop
 * of controld stops it; an unclean death leaves it running for the next controld to adopt.
 * Data-path workers dial it themselves at ctl_script_sup_url(). */
#ifndef CTL_SCRIPT_SUP_H
#define CTL_SCRIPT_SUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define CTL_SCRIPT_PROCS 2 /* Python interpreters */

struct ctl_script_sup_info {
    pid_t pid;
    const char *state; /* "running", "replacing" or "down" */
    unsigned restarts;
    uint64_t started;
    int64_t hb_age_ms; /* -1: no heartbeat answer yet */
    bool adopted;
    const char *replaced_why; /* "" never replaced as hung (borrowed) */
};

/* Start it, or adopt the one an earlier controld left running when it answers within 3 s. */
int ctl_script_sup_start(const char *run_dir, const char *log_level);
/* From the control loop: restart a worker that died, when its back-off is over. */
void ctl_script_sup_poll(void);
/* Replace it now (SIGKILL: its interpreters' state goes anyway); the next poll starts the new
 * one. */
int ctl_script_sup_restart(void);
void ctl_script_sup_info(struct ctl_script_sup_info *out);
/* As ctl_sup_stop_begin(). */
void ctl_script_sup_stop_begin(void);
void ctl_script_sup_stop(void);
/* "ipc://RUN_DIR/script.sock" (after start; "" before). */
const char *ctl_script_sup_url(void);
pid_t ctl_script_sup_pid(void);
unsigned ctl_script_sup_restarts(void);
/* When the running worker was started (unix seconds; 0: none runs). */
uint64_t ctl_script_sup_started(void);

#endif
