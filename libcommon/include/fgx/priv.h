/* Least privilege for the data-path workers: after a worker has opened what needs root (its
 * queues, transparent listeners, raw sockets), one call drops it to an unprivileged user with
 * only the capabilities it still uses, sets no_new_privs and installs its seccomp allow-list
 * (any other system call kills the process: SECCOMP_RET_KILL_PROCESS, which its supervisor sees
 * as SIGSYS). Every worker drops the same way; the lists live beside each worker's main.c. */
#ifndef FGX_PRIV_H
#define FGX_PRIV_H

#include <stddef.h>
#include <sys/types.h>

#define FGX_PRIV_USER_DEFAULT "fgex"

/* Set in a worker's environment by the tests only: SIGUSR2 then makes a system call outside
 * every allow-list, to prove that it kills the worker. */
#define FGX_PRIV_TEST_TRIGGER_ENV "FGEX_TEST_SECCOMP_SIGUSR2"

struct fgx_priv {
    const char *user;     /* the user to run as (its uid and primary gid) */
    const int *caps;      /* CAP_* kept effective and permitted (the bounding set: only these) */
    size_t ncaps;
    /* the allow-list beyond what every threaded glibc program makes (priv.c's base list):
     * SCMP_SYS numbers of this architecture */
    const int *syscalls;
    size_t nsyscalls;
};

/* The designated initializers of a static array of each. */
#define FGX_PRIV_CAPS(a) .caps = (a), .ncaps = sizeof(a) / sizeof((a)[0])
#define FGX_PRIV_SYSCALLS(a) .syscalls = (a), .nsyscalls = sizeof(a) / sizeof((a)[0])

/* Drop as p says, for every thread: call it before the process starts threads of its own
 * (capabilities are per thread). Returns 0, or a negative error code (logged): the caller must
 * then exit rather than run with root. */
int fgx_priv_drop(const struct fgx_priv *p);

/* A socket the workers dial after their drop (path, bound by root): group gid, mode 0660.
 * chown only when its group is another (under systemd's Group=fgex it is fgex already, and
 * the unit has no CAP_CHOWN). Returns 0 or -errno. (libcommon/sock_share.c: no libseccomp.) */
int fgx_sock_share(const char *path, gid_t gid);

/* Send sig to pid (through pidfd when it is >= 0: an adopted process) without CAP_KILL, which
 * the unit's bounding set does not hold: root may signal a process of another uid only with it.
 * A target still root (a worker before its drop), or of our own uid, is signalled directly; on
 * EPERM this thread alone takes uid as its effective uid for the one call (a raw setresuid:
 * glibc's would change every thread; the real and saved uids stay 0, so nothing but this call
 * runs as uid, and the effective capabilities come back with euid 0). uid: the target's real
 * uid (the workers' user, an interpreter's script uid). Needs CAP_SETUID, which controld and
 * scriptworker hold for the drop. Returns 0 or -errno. */
int fgx_signal_as(pid_t pid, int pidfd, uid_t uid, int sig);

#endif
