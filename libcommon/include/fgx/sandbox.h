/* The sandbox of every process that runs a filter file's code (scriptworker's interpreters,
 * controld's check at `script set`): its own mount, network and PID namespaces (no IPC or UTS
 * one: its uid owns no IPC object and may not set the host name, and the unit's
 * RestrictNamespaces allows these three only), an unprivileged uid of its own, a read-only file
 * system with a private scratch /tmp (tmpfs, FGX_SANDBOX_SCRATCH_MIB), fgex's state, run and key
 * directories and /root hidden, no network (a new namespace's loopback, down), and rlimits on
 * memory, processes, open files and file size. It talks to the rest of fgex only over the
 * descriptors it is given. */
#ifndef FGX_SANDBOX_H
#define FGX_SANDBOX_H

#include <sys/types.h>

#define FGX_SANDBOX_SCRATCH_MIB 16
#define FGX_SANDBOX_NPROC 32     /* processes of its uid (RLIMIT_NPROC) */
#define FGX_SANDBOX_NOFILE 256
#define FGX_SANDBOX_FSIZE_MIB 64 /* any one file (RLIMIT_FSIZE); the scratch fills first */
#define FGX_SANDBOX_HIDE_MAX 8

/* fgex's Python package as the sandboxed code sees it: a directory descriptor (it may lie under
 * a hidden directory, /root or /home, when fgex runs from a checkout there) */
#define FGX_SANDBOX_PYDIR_FD 9
#define FGX_SANDBOX_PYDIR "/proc/self/fd/9"

struct fgx_sandbox {
    uid_t uid;        /* uid and gid of the file's code: one no user owns */
    unsigned mem_mib; /* RLIMIT_AS */
    /* directories besides the built-in ones (/var/lib/fgex, /run, /etc/fgex, /root, /home)
     * made empty and unreadable: e.g. a --state-dir elsewhere; NULL-terminated, borrowed */
    const char *hide[FGX_SANDBOX_HIDE_MAX + 1];
    int pydir_fd; /* fgx_sandbox_pydir_open()'s: FGX_SANDBOX_PYDIR in the sandbox */
};

/* Open dir (fgex's Python package) for FGX_SANDBOX_PYDIR, before the fork: a descriptor
 * (O_PATH, close-on-exec, above FGX_SANDBOX_PYDIR_FD: a child's dup2 to 0..4 leaves it) or
 * -errno. */
int fgx_sandbox_pydir_open(const char *dir);

/* fork() into new namespaces (clone with CLONE_NEW*): the child is pid 1 of its own PID
 * namespace, and everything it starts dies with it. Returns the child's pid in the parent, 0 in
 * the child, -errno on failure. The child of a threaded parent must not allocate: call only
 * fgx_sandbox_enter() and an exec in it. */
pid_t fgx_sandbox_fork(void);

/* In the child of fgx_sandbox_fork(), before its exec: the file system view, the rlimits and
 * the uid. Returns 0, or -errno (what failed is written to stderr); the child must then exit. */
int fgx_sandbox_enter(const struct fgx_sandbox *sb);

#endif
