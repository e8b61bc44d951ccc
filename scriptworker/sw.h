/* scriptworker: the process that runs the services' Python filter files, out of the data
 * path's processes. A C parent (this) and a few Python interpreters (python/fgex/serve.py).
 * The data-path threads talk to the interpreters directly (fgx/swproto.h): the parent makes
 * each interpreter's listening socket and keeps it while it replaces the interpreter behind it,
 * watches each interpreter's shared page for a call past its deadline, and replaces one that
 * is stuck or died; a connection always goes to the same interpreter, chosen by its symmetric
 * 5-tuple hash (its globals live there). */
#ifndef SW_H
#define SW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "fgx/sandbox.h"
#include "fgx/swproto.h"

#define SW_PROCS_DEFAULT 2
#define SW_PROCS_MAX FGX_SW_PROCS_MAX
#define SW_STARVED_MAX 20 /* deadlines of wall time a CPU-starved call may take */
#define SW_LINKS_MAX 1024 /* data-path threads' sockets to the parent */
#define SW_TICK_MS 10       /* how often the pages are read while calls are made */
#define SW_TICK_IDLE_MS 50  /* ... while files are loaded but nothing was called for a second */
#define SW_IDLE_AFTER_MS 1000
#define SW_BACKLOG 256
#define SW_SCRIPT_UID_DEFAULT 2147352576u /* controld's --script-uid default (ctl_priv.h) */
#define SW_SCRIPT_MEM_MIB_DEFAULT 512u

struct sw_child {
    pid_t pid;
    uid_t uid;   /* its script uid (what it is signalled as) */
    int lfd;     /* its listening socket (PATH.i): ours, kept across the interpreters */
    int in, out; /* our ends of its stdin (its parent's life) and stdout (its end) */
    int page_fd;
    volatile struct fgx_sw_page *page;
    clockid_t cpu_clock; /* its CPU time (clock_getcpuclockid) */
    bool cpu_clock_ok;
    /* the call its page names, as this parent watches it */
    uint64_t seen_start_ns; /* 0: none */
    uint64_t deadline_ms;   /* when that call is too late */
    uint64_t seen_ms, cpu0_ms; /* when it was first seen, and the interpreter's CPU then */
    uint32_t budget_ms;
    uint32_t calls;         /* the page's counter when last read */
    uint64_t active_ms;     /* when a call was last seen starting or running */
    uint64_t spawned_ms;
    unsigned restarts;
};

struct sw_link {
    int fd;
    uint64_t id; /* its HELLO; 0 until read */
};

struct sw {
    char path[108];
    int ctl; /* our own listening socket (PATH) */
    const char *pydir;
    unsigned nprocs;
    gid_t sock_gid;          /* our sockets' group: the data-path workers' user */
    unsigned script_uid;     /* interpreter i runs as script_uid + i */
    struct fgx_sandbox sandbox; /* its uid set per interpreter */
    struct sw_child child[SW_PROCS_MAX];
    struct sw_link links[SW_LINKS_MAX];
    unsigned nlinks;
    volatile int *stop;
};

/* sw_child.c */
int sw_child_spawn(struct sw *w, struct sw_child *c);
void sw_child_kill(struct sw_child *c);
uint64_t sw_now_ms(void);
/* The interpreter's CPU time (user + system) in ms; 0 when it cannot be read. */
uint64_t sw_child_cpu_ms(const struct sw_child *c);
/* A listening SOCK_SEQPACKET socket at path (an old one there is removed first), group gid and
 * mode 0660: fd or -errno. */
int sw_listen(const char *path, gid_t gid);

/* sw_loop.c */
int sw_loop_run(struct sw *w);

#endif
