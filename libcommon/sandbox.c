/* libcommon: the filter files' sandbox (fgx/sandbox.h). Everything here runs in a child that
 * a threaded parent made with a raw clone: no allocation, no stdio. */
#include "fgx/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *const hidden[] = {"/var/lib/fgex", "/run", "/etc/fgex", "/root", "/home",
                                     "/var/tmp", "/dev/shm", "/dev/mqueue", NULL};

pid_t fgx_sandbox_fork(void)
{
    long pid = syscall(SYS_clone,
                       CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | SIGCHLD,
                       NULL, NULL, NULL, NULL);

    return pid == -1 ? -errno : (pid_t)pid;
}

int fgx_sandbox_pydir_open(const char *dir)
{
    int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC), high;

    if (fd == -1)
        return -errno;
    /* above the descriptors a child sets up (0..4) and FGX_SANDBOX_PYDIR_FD itself */
    high = fcntl(fd, F_DUPFD_CLOEXEC, FGX_SANDBOX_PYDIR_FD + 1);
    close(fd);
    return high == -1 ? -errno : high;
}

static int fail(const char *what, const char *path)
{
    int e = errno;
    char msg[512];
    int n = snprintf(msg, sizeof(msg), "fgex sandbox: %s %s: %s\n", what, path ? path : "",
                     strerror(e));

    if (n > 0)
        (void)!write(2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
    return -e;
}

/* An empty read-only tmpfs nobody but root may enter over path (absent: nothing to hide). */
static int hide(const char *path)
{
    if (access(path, F_OK) == -1)
        return 0;
    if (mount("fgex-hidden", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "size=4k,mode=000") == -1)
        return fail("cannot hide", path);
    return 0;
}

static int rlimit_set(int res, rlim_t v, const char *what)
{
    struct rlimit rl = {.rlim_cur = v, .rlim_max = v};

    if (setrlimit(res, &rl) == -1)
        return fail("setrlimit", what);
    return 0;
}

int fgx_sandbox_enter(const struct fgx_sandbox *sb)
{
    struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
    char opts[96];
    int rv;

    /* the package through its descriptor: no path to it needs to stay visible */
    if (dup2(sb->pydir_fd, FGX_SANDBOX_PYDIR_FD) == -1)
        return fail("cannot pass the Python package", NULL);
    /* nothing mounted here reaches the box's own mount table */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == -1)
        return fail("cannot make the mounts private", NULL);
    if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &ro, sizeof(ro)) == -1)
        return fail("cannot make the file system read-only", NULL);
    /* its own processes only */
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == -1)
        return fail("cannot mount", "/proc");
    for (size_t i = 0; hidden[i]; i++)
        if ((rv = hide(hidden[i])) < 0)
            return rv;
    for (size_t i = 0; i < FGX_SANDBOX_HIDE_MAX && sb->hide[i]; i++)
        if ((rv = hide(sb->hide[i])) < 0)
            return rv;
    /* the only place it may write: small, its own, gone with it (mounted last: a hidden
     * directory under /tmp, the tests' state, is hidden by it too) */
    (void)snprintf(opts, sizeof(opts), "size=%um,nr_inodes=4096,mode=0700,uid=%u,gid=%u",
                   FGX_SANDBOX_SCRATCH_MIB, (unsigned)sb->uid, (unsigned)sb->uid);
    if (mount("fgex-scratch", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts) == -1)
        return fail("cannot mount the scratch directory", "/tmp");
    if ((rv = rlimit_set(RLIMIT_AS, (rlim_t)sb->mem_mib << 20, "RLIMIT_AS")) < 0 ||
        (rv = rlimit_set(RLIMIT_NPROC, FGX_SANDBOX_NPROC, "RLIMIT_NPROC")) < 0 ||
        (rv = rlimit_set(RLIMIT_NOFILE, FGX_SANDBOX_NOFILE, "RLIMIT_NOFILE")) < 0 ||
        (rv = rlimit_set(RLIMIT_FSIZE, (rlim_t)FGX_SANDBOX_FSIZE_MIB << 20, "RLIMIT_FSIZE")) <
            0 ||
        (rv = rlimit_set(RLIMIT_CORE, 0, "RLIMIT_CORE")) < 0)
        return rv;
    /* raw calls: glibc's would signal the parent's threads, which this child does not have */
    if (syscall(SYS_setgroups, 0, NULL) == -1 ||
        syscall(SYS_setresgid, sb->uid, sb->uid, sb->uid) == -1 ||
        syscall(SYS_setresuid, sb->uid, sb->uid, sb->uid) == -1)
        return fail("cannot change to the script uid", NULL);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1)
        return fail("PR_SET_NO_NEW_PRIVS", NULL);
    if (chdir("/tmp") == -1)
        return fail("chdir", "/tmp");
    return 0;
}
