/* controld, the worker processes as processes (issue 24): one it spawned (its child, reaped with
 * waitpid) or one it adopted after a restart of its own (not its child: watched through a pidfd,
 * Linux >= 5.3), behind one interface, plus the pid file through which a restarted controld
 * finds the workers its predecessor left running. Used by ctl_supervise.c and ctl_script_sup.c. */
#ifndef CTL_PROC_H
#define CTL_PROC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct ctl_proc {
    pid_t pid;    /* 0: none */
    int pidfd;    /* adopted: a pidfd on it; -1 otherwise */
    bool adopted; /* not controld's child */
};

#define CTL_PROC_INIT {.pid = 0, .pidfd = -1, .adopted = false}

/* A child just forked. */
void ctl_proc_child(struct ctl_proc *p, pid_t pid);
/* Take pid over (not a child). Returns 0 or -errno (it is gone, or no pidfds). */
int ctl_proc_adopt(struct ctl_proc *p, pid_t pid);
/* Without waiting: 0 while it runs; 1 when it is gone (then p is empty, and *status is the
 * waitpid() status of a child, or -1 when it is not known: an adopted one). */
int ctl_proc_reap(struct ctl_proc *p, int *status);
int ctl_proc_signal(const struct ctl_proc *p, int sig);
/* A pidfd that polls readable once p's process has ended (a child's too, reaped or not), for a
 * wait that must end with it; the caller closes it. -1 (errno set) when there is none. */
int ctl_proc_watch_fd(const struct ctl_proc *p);
/* SIGTERM, SIGKILL after grace_ms, wait until it is gone; p is empty after. */
void ctl_proc_stop(struct ctl_proc *p, int grace_ms, const char *name);

/* RUN_DIR/NAME.pid: the worker's pid, its start time (field 22 of /proc/PID/stat) and config
 * (a hash of its command line), written at its spawn and removed when controld stops it.
 * Written atomically (rename). */
int ctl_proc_pidfile_write(const char *run_dir, const char *name, pid_t pid, uint64_t config);
/* The pid the file names when that very process still runs (same start time: not a reused
 * pid) with the same config; minus that pid when it runs with another config; else 0. */
pid_t ctl_proc_pidfile_read(const char *run_dir, const char *name, uint64_t config);
/* A config value for the pid file: FNV-1a over the NULL-terminated argv. */
uint64_t ctl_proc_config(char *const *argv);
void ctl_proc_pidfile_remove(const char *run_dir, const char *name);

#endif
