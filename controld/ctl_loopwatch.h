/* controld's control loop watch (issue 25, the soak's 41 s of silence): a thread of its own that
 * sees the loop stop turning. Everything controld does for fgexctl, the page and the workers'
 * supervision runs in that one loop, so a call that blocks it (a commit waiting on the disk, a
 * kernel lock, a call that should have been bounded) used to leave no trace: no log line, no
 * answer, fgexctl timing out. Once the loop has not turned for CTL_LOOPWATCH_STALL_MS, the
 * thread logs which step of the loop it is in and where the control thread waits in the kernel
 * (its system call, kernel stack and state, from /proc), again every CTL_LOOPWATCH_REPEAT_MS
 * while it lasts, and answers every request that comes meanwhile at once with an error that
 * says so (nothing was done, try again) instead of leaving it unanswered. When the loop turns
 * again, the control thread logs and notes in the health log how long it was blocked and in
 * which step. */
#ifndef CTL_LOOPWATCH_H
#define CTL_LOOPWATCH_H

#include <stdint.h>

#include "fgx/chan.h"

#define CTL_LOOPWATCH_STALL_MS 2000
#define CTL_LOOPWATCH_REPEAT_MS 10000

/* Start the thread, which answers on ctl while the loop is blocked (ctl must outlive
 * ctl_loopwatch_stop()). 0, or -errno (logged): controld then runs without the watch. */
int ctl_loopwatch_start(struct fgx_chan *ctl);
/* The control thread, once a turn: the loop goes on. A stall that was reported ends here (log
 * line and health note). now_ms: a monotonic clock. */
void ctl_loopwatch_turn(uint64_t now_ms);
/* The step of the loop the control thread enters (a string literal, named in the reports):
 * progress, as a turn is. */
void ctl_loopwatch_step(const char *step);
/* Inside the step "a request": which one (its command's name, static storage; NULL none). */
void ctl_loopwatch_request(const char *name);
/* Stop and join the thread; a no-op when it was not started. */
void ctl_loopwatch_stop(void);

#endif
