/* fgx_signal_as() (libcommon/signal_as.c): root without CAP_KILL, as under deploy/fgex.service,
 * signals a process of another uid as that uid, and is root with its capabilities after.
 * Criterion runs every test in its own process: the capabilities dropped here are that
 * process's alone. Needs root. */
#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cap-ng.h>

#include "fgx/priv.h"

#define OTHER_UID ((uid_t)2147000123) /* no user's */

/* A child of OTHER_UID that waits to be killed. */
static pid_t child_of_other_uid(void)
{
    pid_t pid = fork();

    cr_assert_neq(pid, -1);
    if (pid == 0) {
        if (syscall(SYS_setresgid, OTHER_UID, OTHER_UID, OTHER_UID) == -1 ||
            syscall(SYS_setresuid, OTHER_UID, OTHER_UID, OTHER_UID) == -1)
            _exit(3);
        for (;;)
            pause();
    }
    /* until it runs as OTHER_UID: kill(0) fails with EPERM once CAP_KILL is gone */
    return pid;
}

/* Our CAP_KILL gone (effective, permitted, bounding), the rest kept. */
static void drop_cap_kill(void)
{
    capng_get_caps_process();
    cr_assert_eq(capng_update(CAPNG_DROP, CAPNG_EFFECTIVE | CAPNG_PERMITTED | CAPNG_BOUNDING_SET,
                              CAP_KILL),
                 0);
    cr_assert_eq(capng_apply(CAPNG_SELECT_BOTH), 0);
}

static void wait_dropped(pid_t pid)
{
    for (int i = 0; i < 200 && kill(pid, 0) == 0; i++)
        usleep(5000);
    cr_assert_eq(kill(pid, 0), -1, "the child never became uid %u", (unsigned)OTHER_UID);
    cr_assert_eq(errno, EPERM);
}

static void assert_root_with_caps(void)
{
    uid_t r, e, s;

    cr_assert_eq(getresuid(&r, &e, &s), 0);
    cr_assert(r == 0 && e == 0 && s == 0, "uids %u %u %u after", r, e, s);
    capng_get_caps_process();
    cr_assert(capng_have_capability(CAPNG_EFFECTIVE, CAP_SETUID), "CAP_SETUID lost");
    cr_assert(capng_have_capability(CAPNG_EFFECTIVE, CAP_NET_ADMIN), "CAP_NET_ADMIN lost");
    cr_assert(!capng_have_capability(CAPNG_EFFECTIVE, CAP_KILL), "CAP_KILL came back");
    cr_assert_eq(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0), 1, "no longer dumpable");
}

Test(signal_as, kills_a_process_of_another_uid_without_cap_kill)
{
    pid_t pid;
    int status;

    if (geteuid() != 0)
        cr_skip_test("needs root");
    drop_cap_kill();
    pid = child_of_other_uid();
    wait_dropped(pid);
    cr_assert_eq(fgx_signal_as(pid, -1, OTHER_UID, SIGKILL), 0);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %#x", status);
    assert_root_with_caps();
}

Test(signal_as, through_a_pidfd)
{
    pid_t pid;
    int fd, status;

    if (geteuid() != 0)
        cr_skip_test("needs root");
    drop_cap_kill();
    pid = child_of_other_uid();
    wait_dropped(pid);
    fd = pidfd_open(pid, 0);
    cr_assert_neq(fd, -1);
    cr_assert_eq(fgx_signal_as(pid, fd, OTHER_UID, SIGTERM), 0);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM, "status %#x", status);
    close(fd);
    assert_root_with_caps();
}

Test(signal_as, the_wrong_uid_is_refused_and_leaves_us_root)
{
    pid_t pid;

    if (geteuid() != 0)
        cr_skip_test("needs root");
    drop_cap_kill();
    pid = child_of_other_uid();
    wait_dropped(pid);
    cr_assert_eq(fgx_signal_as(pid, -1, OTHER_UID + 1, SIGKILL), -EPERM);
    assert_root_with_caps();
    cr_assert_eq(kill(pid, 0), -1, "the child is still there, and still not ours to signal");
    cr_assert_eq(fgx_signal_as(pid, -1, OTHER_UID, SIGKILL), 0);
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
}

Test(signal_as, a_root_target_is_signalled_directly)
{
    pid_t pid;
    int status;

    if (geteuid() != 0)
        cr_skip_test("needs root");
    drop_cap_kill();
    pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        for (;;)
            pause();
    }
    /* uid is only a fallback: a process of our own uid needs no change */
    cr_assert_eq(fgx_signal_as(pid, -1, OTHER_UID, SIGKILL), 0);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_root_with_caps();
}
