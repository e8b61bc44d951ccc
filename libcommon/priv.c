/* libcommon: a worker's drop of privileges (fgx/priv.h). libcap-ng changes the ids while it
 * keeps the named capabilities (the keep-caps dance of setresuid and capset), libseccomp builds
 * the filter from a list of names. */
#include "fgx/priv.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cap-ng.h>
#include <seccomp.h>

#include "fgx/log.h"

/* What any threaded program on glibc makes, whatever its job: memory, threads and their
 * locks, time, signals, its own descriptors, the log lines on stderr, and exiting. A worker's
 * own list (beside its main.c) adds what it does. */
static const int base_syscalls[] = {
    SCMP_SYS(read),           SCMP_SYS(write),          SCMP_SYS(readv),
    SCMP_SYS(writev),         SCMP_SYS(close),          SCMP_SYS(fcntl),
    SCMP_SYS(dup),            SCMP_SYS(dup3),           SCMP_SYS(pipe2),
    SCMP_SYS(fstat),          SCMP_SYS(newfstatat),     SCMP_SYS(lseek),
    SCMP_SYS(brk),            SCMP_SYS(mmap),           SCMP_SYS(munmap),
    SCMP_SYS(mprotect),       SCMP_SYS(madvise),        SCMP_SYS(mremap),
    SCMP_SYS(futex),          SCMP_SYS(clone),          SCMP_SYS(clone3),
    SCMP_SYS(set_robust_list), SCMP_SYS(rseq),          SCMP_SYS(set_tid_address),
    SCMP_SYS(gettid),         SCMP_SYS(getpid),         SCMP_SYS(sched_yield),
    SCMP_SYS(sched_getaffinity), SCMP_SYS(clock_gettime), SCMP_SYS(clock_getres),
    SCMP_SYS(clock_nanosleep), SCMP_SYS(nanosleep),     SCMP_SYS(gettimeofday),
    SCMP_SYS(rt_sigaction),   SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigreturn),
    SCMP_SYS(sigaltstack),    SCMP_SYS(tgkill),         SCMP_SYS(getrandom),
    SCMP_SYS(eventfd2),       SCMP_SYS(poll),           SCMP_SYS(ppoll),
    SCMP_SYS(epoll_create1),  SCMP_SYS(epoll_ctl),      SCMP_SYS(epoll_wait),
    SCMP_SYS(epoll_pwait),    SCMP_SYS(getrusage),      SCMP_SYS(exit),
    SCMP_SYS(exit_group),
    /* the kernel's own: a sleep or a poll stopped by SIGSTOP (or a debugger) and continued is
     * taken up again through restart_syscall; without it a continued worker died of SIGSYS */
    SCMP_SYS(restart_syscall),
    /* the statistics' resident memory, from a file opened before the drop (fgx_wstats_open());
     * glibc's qsort() of a large array (the events of a burst) first asks sysinfo() how much
     * memory there is */
    SCMP_SYS(pread64),        SCMP_SYS(sysinfo),
    /* the scriptworker link looks for its sockets before it dials (libcommon/swlink.c) */
    SCMP_SYS(access),         SCMP_SYS(faccessat),      SCMP_SYS(faccessat2),
};

/* What the sanitizer runtimes call besides the program (ASan/UBSan/LSan: reading their own
 * maps, the leak check's stop-the-world tracer thread, the report): only in the sanitizer
 * build. */
#ifdef FGX_SANITIZE
static const int san_syscalls[] = {
    SCMP_SYS(ptrace),    SCMP_SYS(wait4),       SCMP_SYS(prctl),     SCMP_SYS(sched_yield),
    SCMP_SYS(readlink),  SCMP_SYS(readlinkat),  SCMP_SYS(sigaltstack), SCMP_SYS(clone),
    SCMP_SYS(getppid),   SCMP_SYS(kill),        SCMP_SYS(tgkill),    SCMP_SYS(open),
    SCMP_SYS(openat),    SCMP_SYS(getdents64),  SCMP_SYS(madvise),   SCMP_SYS(mremap),
    SCMP_SYS(pipe2),     SCMP_SYS(uname),       SCMP_SYS(rt_sigaction), SCMP_SYS(sched_getaffinity),
    SCMP_SYS(mincore),   SCMP_SYS(munlock),     SCMP_SYS(personality), SCMP_SYS(getrlimit),
    SCMP_SYS(prlimit64), SCMP_SYS(setrlimit),   SCMP_SYS(fstat),     SCMP_SYS(newfstatat),
    SCMP_SYS(lseek),     SCMP_SYS(getpid),      SCMP_SYS(gettid),    SCMP_SYS(exit_group),
};
#endif

static void test_trigger(int sig)
{
    (void)sig;
    /* acct(2) is in no worker's list: the filter kills the process here */
    (void)syscall(SYS_acct, NULL);
}

static int user_lookup(const char *name, uid_t *uid, gid_t *gid)
{
    struct passwd pw, *res = NULL;
    char buf[4096];
    int e = getpwnam_r(name, &pw, buf, sizeof(buf), &res);

    if (e != 0 || res == NULL) {
        fgx_err("privileges: no user %s (%s): controld creates it at start (useradd --system)",
                name, e ? strerror(e) : "not in the user database");
        return e ? -e : -ENOENT;
    }
    *uid = pw.pw_uid;
    *gid = pw.pw_gid;
    return 0;
}

static int caps_drop(const struct fgx_priv *p, uid_t uid, gid_t gid)
{
    int rv;

    capng_clear(CAPNG_SELECT_ALL);
    for (size_t i = 0; i < p->ncaps; i++)
        if (capng_update(CAPNG_ADD, CAPNG_EFFECTIVE | CAPNG_PERMITTED | CAPNG_BOUNDING_SET,
                         (unsigned)p->caps[i]) != 0) {
            fgx_err("privileges: capability %d unknown", p->caps[i]);
            return -EINVAL;
        }
    /* the bounding set first, while CAP_SETPCAP is still ours */
    rv = capng_apply(CAPNG_SELECT_BOUNDS);
    if (rv != 0) {
        fgx_err("privileges: cannot set the bounding set (libcap-ng %d)", rv);
        return -EPERM;
    }
    rv = capng_change_id((int)uid, (int)gid, CAPNG_DROP_SUPP_GRP | CAPNG_CLEAR_AMBIENT);
    if (rv != 0) {
        fgx_err("privileges: cannot change to uid %u gid %u keeping %zu capabilities "
                "(libcap-ng %d)",
                (unsigned)uid, (unsigned)gid, p->ncaps, rv);
        return -EPERM;
    }
    if (getuid() != uid || geteuid() != uid || getgid() != gid) {
        fgx_err("privileges: the uid change did not take");
        return -EPERM;
    }
    return 0;
}

static int seccomp_install(const struct fgx_priv *p)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
    int rv = -ENOMEM;

    if (ctx == NULL) {
        fgx_err("privileges: seccomp_init failed");
        return rv;
    }
    /* every thread, also those a library started already */
    rv = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
    /* A worker opens no file after set-up; nng names its threads through
     * /proc/self/task/N/comm, which may fail: open is refused with EACCES, not fatal. */
#ifndef FGX_SANITIZE
    if (rv == 0)
        rv = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(openat), 0);
    if (rv == 0)
        rv = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(open), 0);
#endif
    for (size_t i = 0; rv == 0 && i < sizeof(base_syscalls) / sizeof(base_syscalls[0]); i++)
        rv = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, base_syscalls[i], 0);
    for (size_t i = 0; rv == 0 && i < p->nsyscalls; i++)
        rv = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, p->syscalls[i], 0);
#ifdef FGX_SANITIZE
    for (size_t i = 0; rv == 0 && i < sizeof(san_syscalls) / sizeof(san_syscalls[0]); i++)
        rv = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, san_syscalls[i], 0);
#endif
    if (rv == 0)
        rv = seccomp_load(ctx);
    if (rv != 0)
        fgx_err("privileges: cannot install the seccomp filter: %s", strerror(-rv));
    seccomp_release(ctx);
    return rv;
}

int fgx_priv_drop(const struct fgx_priv *p)
{
    uid_t uid;
    gid_t gid;
    int rv;

    rv = user_lookup(p->user, &uid, &gid);
    if (rv < 0)
        return rv;
    /* the log's clock reads /etc/localtime once: now, while open() is allowed */
    tzset();
    if (getenv(FGX_PRIV_TEST_TRIGGER_ENV) != NULL)
        (void)signal(SIGUSR2, test_trigger);
    rv = caps_drop(p, uid, gid);
    if (rv < 0)
        return rv;
    /* The uid change made us non-dumpable, and then no process of another uid without
     * CAP_SYS_PTRACE sees us in a /proc mounted with hidepid (the unit's
     * ProtectProc=invisible): controld, finding the workers a previous controld left
     * (RUN_DIR/NAME.pid, their start time), could not adopt us. Dumpable again: our /proc
     * files are readable by our own uid, which only the workers have, and whose seccomp lists
     * allow no open() and no ptrace(). */
    if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == -1) {
        rv = -errno;
        fgx_err("privileges: PR_SET_DUMPABLE: %s", strerror(errno));
        return rv;
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1) {
        rv = -errno;
        fgx_err("privileges: PR_SET_NO_NEW_PRIVS: %s", strerror(errno));
        return rv;
    }
    rv = seccomp_install(p);
    if (rv < 0)
        return rv;
    fgx_info("running as %s (uid %u), %zu capabilities kept, %zu system calls allowed", p->user,
             (unsigned)uid, p->ncaps, p->nsyscalls);
    return 0;
}
