/* libcommon: a signal to a process of another uid without CAP_KILL (fgx/priv.h). */
#include "fgx/priv.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static int sig_send(pid_t pid, int pidfd, int sig)
{
    int rv = pidfd >= 0 ? pidfd_send_signal(pidfd, sig, NULL, 0) : kill(pid, sig);

    return rv == -1 ? -errno : 0;
}

int fgx_signal_as(pid_t pid, int pidfd, uid_t uid, int sig)
{
    int rv = sig_send(pid, pidfd, sig), dumpable;

    if (rv != -EPERM || uid == 0 || geteuid() != 0)
        return rv;
    /* kill(2)'s check: our real or effective uid is the target's real or saved one */
    dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
    if (syscall(SYS_setresuid, (uid_t)-1, uid, (uid_t)-1) == -1)
        return -errno;
    rv = sig_send(pid, pidfd, sig);
    /* back to euid 0 (our real uid: always allowed), the permitted capabilities effective
     * again; were that refused this thread would go on without them: stop rather */
    if (syscall(SYS_setresuid, (uid_t)-1, (uid_t)0, (uid_t)-1) == -1)
        abort();
    /* the kernel clears the dumpable flag at every change of euid: a core of ours is still
     * wanted (it clears PR_SET_PDEATHSIG too, which neither controld nor scriptworker sets) */
    if (dumpable == 1)
        (void)prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    return rv;
}
