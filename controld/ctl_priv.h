/* controld, privileges: the unprivileged user the workers run as (created at start when the
 * box has none), the worker sockets that user must reach, and the script sandbox's settings
 * (fgx/sandbox.h). controld itself stays root: nftables, policy routes, spawning the workers. */
#ifndef CTL_PRIV_H
#define CTL_PRIV_H

#include <sys/types.h>

#include "fgx/sandbox.h"

#define CTL_PRIV_SCRIPT_UID_DEFAULT 2147352576u /* 0x7ffe0000: a range no user owns */
#define CTL_PRIV_SCRIPT_MEM_MIB_DEFAULT 512u

struct ctl_priv {
    const char *user; /* the workers' user (--user, default fgex) */
    uid_t uid;
    gid_t gid;
    unsigned script_uid;     /* --script-uid: interpreter i runs as it + i, the check + 16 */
    unsigned script_mem_mib; /* --script-memory: RLIMIT_AS of each */
    const char *state_dir, *run_dir; /* hidden from the files' code too */
};

/* Look the user up; create it (useradd --system, no home, nologin) when there is none. Returns
 * 0 with p->uid/gid set, or a negative error code (logged). */
int ctl_priv_init(struct ctl_priv *p);
/* The settings ctl_priv_init() filled (NULL before). */
const struct ctl_priv *ctl_priv_get(void);
/* A socket of RUN_DIR the workers dial after their drop: group the workers' user, 0660. */
int ctl_priv_socket_share(const char *path);

/* The sandbox of the check at `script set` (fgx/sandbox.h): uid script_uid + 16. */
void ctl_priv_check_sandbox(struct fgx_sandbox *out);

/* What a worker killed by seccomp (pid) tried: "syscall N" as the kernel logged it (the audit
 * line in /dev/kmsg: SIGSYS in a wait status does not say), else a sentence without the
 * number. Returns a static string, valid until the next call. */
const char *ctl_priv_seccomp_syscall(pid_t pid);
/* One kernel log record: the system call of pid's seccomp kill it reports (an audit
 * type=1326 line), or -1 when it is not one. */
long ctl_priv_audit_syscall(const char *rec, pid_t pid);

#endif
