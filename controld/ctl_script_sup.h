/* controld, the script worker's supervision (issue 16): scriptworker runs always, as the
 * proxy worker does, so that a service can get a script at any time; it is started, watched
 * and restarted here (with a back-off), and dies with controld. Data-path workers dial it
 * themselves at ctl_script_sup_url(). */
#ifndef CTL_SCRIPT_SUP_H
#define CTL_SCRIPT_SUP_H

#include <stdint.h>
#include <sys/types.h>

#define CTL_SCRIPT_PROCS 2 /* Python interpreters */

int ctl_script_sup_start(const char *run_dir, const char *log_level);
/* From the control loop: restart a worker that died, when its back-off is over. */
void ctl_script_sup_poll(void);
void ctl_script_sup_stop(void);
/* "ipc://RUN_DIR/script.sock" (after start; "" before). */
const char *ctl_script_sup_url(void);
pid_t ctl_script_sup_pid(void);
unsigned ctl_script_sup_restarts(void);
/* When the running worker was started (unix seconds; 0: none runs). */
uint64_t ctl_script_sup_started(void);

#endif
