/* scriptworker: the process that runs the services' Python filter files, out of the data
 * path's processes. A C parent (this) and a few Python interpreters (python/fgex/serve.py)
 * that it starts, feeds over pipes and replaces when one is stuck past its call's deadline or
 * dies. Data-path workers talk to it over nng (fgx/swproto.h); a connection always goes to
 * the same interpreter, chosen by its symmetric 5-tuple hash (its globals live there). */
#ifndef SW_H
#define SW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include <nng/nng.h>

#include "fgx/swproto.h"

#define SW_PROCS_DEFAULT 2
#define SW_PROCS_MAX 16
#define SW_QMAX 4096    /* calls waiting for one interpreter; past it: an ERROR verdict */
#define SW_STARVED_MAX 20 /* deadlines of wall time a CPU-starved call may take */
#define SW_SEND_MS 200 /* how long a frame waits for a peer's queue */
#define SW_PAGE 256     /* the shared page where an interpreter names the function it runs */

struct sw_call {
    uint32_t pipe;    /* the peer (socket index) the DATA came from */
    uint64_t conn;    /* as the sender numbered it */
    uint32_t seq, service;
    uint32_t budget_ms; /* the service's deadline */
    uint64_t deadline_ms; /* once it is the interpreter's current call: when it is too late */
    uint64_t started_ms;  /* when it became the current call */
    uint64_t cpu0_ms;     /* the interpreter's CPU time then */
};

struct sw_child {
    pid_t pid;
    int in, out;       /* our ends: its stdin, its stdout (non-blocking) */
    int page_fd;
    uint8_t *page;
    uint8_t *wbuf;     /* frames not yet taken by its stdin */
    size_t wlen, wcap;
    uint8_t *rbuf;     /* bytes of its stdout not yet a whole frame */
    size_t rlen, rcap;
    struct sw_call q[SW_QMAX];
    size_t qhead, qlen;
    bool ready;        /* it finished starting (imports): the head call's clock runs */
    clockid_t cpu_clock; /* its CPU time (clock_getcpuclockid) */
    bool cpu_clock_ok;
    unsigned restarts;
};

struct sw_script {
    uint32_t service, deadline_ms;
    uint32_t pipe;     /* who sent it: where its log goes when no call is waiting */
    uint8_t *frame;    /* the whole SCRIPT frame, to give a new interpreter */
    size_t len;
};

/* One nng pair1 socket per peer (a data-path thread dials URL-N, N its index): a mono pair
 * applies backpressure where a polyamorous one drops what a pipe's short queue cannot take. */
#define SW_PEERS_DEFAULT 16
#define SW_PEERS_MAX 64

struct sw {
    nng_socket socks[SW_PEERS_MAX];
    int recv_fds[SW_PEERS_MAX];
    unsigned npeers;
    const char *pydir;
    unsigned nprocs;
    struct sw_child child[SW_PROCS_MAX];
    struct sw_script *scripts;
    size_t nscripts;
    uint32_t last_pipe;
    uint64_t send_lost; /* frames a peer did not take within SW_SEND_MS */
    volatile int *stop;
};

/* sw_child.c */
int sw_child_spawn(struct sw *w, struct sw_child *c);
void sw_child_kill(struct sw_child *c);
int sw_child_queue(struct sw_child *c, const struct fgx_sw_hdr *h, const void *payload);
int sw_child_flush(struct sw_child *c);
uint64_t sw_now_ms(void);
/* The head call's clock starts now (it became the current one, or the interpreter is ready). */
void sw_child_head_start(struct sw_child *c);
/* The interpreter's CPU time (user + system) in ms, from /proc; 0 when it cannot be read. */
uint64_t sw_child_cpu_ms(const struct sw_child *c);

/* sw_loop.c */
int sw_loop_run(struct sw *w);

#endif
