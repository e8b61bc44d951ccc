/* controld's control loop watch (ctl_loopwatch.h). */
#include "controld/ctl_loopwatch.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "controld/ctl_health.h"
#include "controld/ctl_rpc.h"
#include "fgx/log.h"

#define WATCH_TICK_MS 100 /* the thread's look period while the loop turns */
/* Its receive period while the loop is blocked: once the loop goes on, a request can still
 * reach this thread's receive for that long (it is then told so, and to try again). */
#define WATCH_RECV_MS 10
#define WATCH_REPLY_MS 1000

static struct {
    pthread_t thread;
    bool started;
    struct fgx_chan *ctl;
    pid_t tid;           /* the control thread's */
    uint64_t turn_ms;    /* __atomic: the control thread's last turn */
    const char *step;    /* __atomic: the step it is in */
    const char *request; /* __atomic: in the step "a request", which one */
    int stop;            /* __atomic */
    pthread_mutex_t mtx; /* the report below, between the two threads */
    bool reported;       /* a stall was logged and is not over yet for the control thread */
    uint64_t from_ms;    /* its start: the last turn before it */
    unsigned answered;   /* requests answered meanwhile */
    char where[320];     /* what the first report said */
} w = {.mtx = PTHREAD_MUTEX_INITIALIZER};

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static const char *syscall_name(long nr)
{
    static const struct {
        long nr;
        const char *name;
    } names[] = {
        {SYS_fdatasync, "fdatasync"},
        {SYS_fsync, "fsync"},
        {SYS_msync, "msync"},
        {SYS_futex, "futex"},
        {SYS_ppoll, "ppoll"},
        {SYS_read, "read"},
        {SYS_write, "write"},
        {SYS_sendto, "sendto"},
        {SYS_recvfrom, "recvfrom"},
        {SYS_sendmsg, "sendmsg"},
        {SYS_recvmsg, "recvmsg"},
        {SYS_wait4, "wait4"},
        {SYS_waitid, "waitid"},
        {SYS_clone, "clone"},
        {SYS_openat, "openat"},
        {SYS_nanosleep, "nanosleep"},
        {SYS_clock_nanosleep, "clock_nanosleep"},
#ifdef SYS_poll
        {SYS_poll, "poll"},
#endif
#ifdef SYS_fork
        {SYS_fork, "fork"},
#endif
    };

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (names[i].nr == nr)
            return names[i].name;
    return NULL;
}

/* One line of /proc/self/task/TID/NAME into buf (without its newline); "" when unreadable. */
static void task_read(const char *name, char *buf, size_t len)
{
    char path[64];
    FILE *f;

    buf[0] = '\0';
    (void)snprintf(path, sizeof(path), "/proc/self/task/%d/%s", (int)w.tid, name);
    f = fopen(path, "re");
    if (!f)
        return;
    if (!fgets(buf, (int)len, f))
        buf[0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    (void)fclose(f);
}

/* The kernel stack's first frames, "a < b < c" (root only; "" otherwise). */
static void task_stack(char *buf, size_t len)
{
    char path[64], line[160];
    size_t used = 0;
    FILE *f;
    int n = 0;

    buf[0] = '\0';
    (void)snprintf(path, sizeof(path), "/proc/self/task/%d/stack", (int)w.tid);
    f = fopen(path, "re");
    if (!f)
        return;
    while (n < 4 && fgets(line, sizeof(line), f)) {
        char *fn = strchr(line, ']');

        fn = fn ? fn + 1 : line;
        fn += strspn(fn, " ");
        fn[strcspn(fn, "+\n ")] = '\0';
        if (!*fn)
            continue;
        used +=
            (size_t)snprintf(buf + used, used < len ? len - used : 0, "%s%s", n ? " < " : "", fn);
        if (used >= len)
            break;
        n++;
    }
    (void)fclose(f);
}

/* Where the control thread is: the loop's step, its system call, state and kernel stack. */
static void describe(char *buf, size_t len)
{
    const char *step = __atomic_load_n(&w.step, __ATOMIC_ACQUIRE);
    const char *req = __atomic_load_n(&w.request, __ATOMIC_ACQUIRE);
    char sc[128], wchan[64], stat[512], stack[160], call[48];
    const char *st = "?", *name;
    char *p;
    long nr;

    task_read("syscall", sc, sizeof(sc));
    task_read("wchan", wchan, sizeof(wchan));
    task_read("stat", stat, sizeof(stat));
    task_stack(stack, sizeof(stack));
    p = strrchr(stat, ')');
    if (p && p[1] == ' ' && p[2])
        st = p[2] == 'D'   ? "in uninterruptible sleep"
             : p[2] == 'R' ? "running"
             : p[2] == 'S' ? "sleeping"
             : p[2] == 't' ? "stopped by a tracer"
             : p[2] == 'T' ? "stopped"
                           : "?";
    if (sc[0] == '\0' || strcmp(sc, "running") == 0) {
        (void)snprintf(call, sizeof(call), "no system call");
    } else {
        nr = strtol(sc, NULL, 10);
        name = syscall_name(nr);
        if (name)
            (void)snprintf(call, sizeof(call), "system call %s", name);
        else
            (void)snprintf(call, sizeof(call), "system call %ld", nr);
    }
    (void)snprintf(buf, len, "in %s%s%s%s; the control thread is %s, %s%s%s%s%s", step ? step : "?",
                   req ? " (" : "", req ? req : "", req ? ")" : "", st, call,
                   wchan[0] && strcmp(wchan, "0") != 0 ? ", waiting in " : "",
                   wchan[0] && strcmp(wchan, "0") != 0 ? wchan : "",
                   stack[0] ? ", kernel stack " : "", stack);
}

/* The reply to a request that came while the loop was blocked. It says for how long and no
 * more (where it waits is in the log): the sender may be a remote peer not logged in yet. */
static void answer(struct fgx_chan_ctx *x, uint64_t from_ms)
{
    uint64_t turn = __atomic_load_n(&w.turn_ms, __ATOMIC_ACQUIRE), now = mono_ms();
    bool over = now < turn + CTL_LOOPWATCH_STALL_MS;
    void *reply = NULL;
    size_t rlen = 0;
    char msg[256];

    pthread_mutex_lock(&w.mtx);
    w.answered++;
    pthread_mutex_unlock(&w.mtx);
    if (over)
        (void)snprintf(
            msg, sizeof(msg),
            "controld's control loop was blocked for %.1f s and has just gone on (its log "
            "says where it waited): this request was not run, try again",
            (double)(turn - from_ms) / 1000.0);
    else
        (void)snprintf(msg, sizeof(msg),
                       "controld is not answering for now: its control loop has been blocked for "
                       "%.1f s (its log says where it waits); this request was not run, try again",
                       (double)(now - from_ms) / 1000.0);
    if (ctl_rpc_blocked_reply(msg, (unsigned)((now - from_ms) / 1000), &reply, &rlen) == 0 &&
        fgx_chan_ctx_send(x, reply, rlen, WATCH_REPLY_MS) < 0)
        fgx_debug("loop watch: a reply was not sent");
    free(reply);
}

static void *watch_main(void *arg)
{
    struct fgx_chan_ctx *x = NULL;
    uint64_t logged_ms = 0, seen = 0;

    (void)arg;
    while (!__atomic_load_n(&w.stop, __ATOMIC_ACQUIRE)) {
        uint64_t turn = __atomic_load_n(&w.turn_ms, __ATOMIC_ACQUIRE), now = mono_ms();
        void *buf = NULL;
        size_t len = 0;
        int rv;

        if (now < turn + CTL_LOOPWATCH_STALL_MS) {
            /* the loop turns: its own receive takes every request again */
            fgx_chan_ctx_close(x);
            x = NULL;
            usleep(WATCH_TICK_MS * 1000);
            continue;
        }
        if (seen != turn) {
            /* Stale at one look only: a process stopped as a whole (SIGSTOP) wakes with this
             * thread and the loop together, and the loop turns at once. Stale at the next look
             * too, it is the loop that is blocked. */
            seen = turn;
            usleep(WATCH_TICK_MS * 1000);
            continue;
        }
        pthread_mutex_lock(&w.mtx);
        if (!w.reported || w.from_ms != turn || now - logged_ms >= CTL_LOOPWATCH_REPEAT_MS) {
            char where[320];

            describe(where, sizeof(where));
            if (!w.reported || w.from_ms != turn) {
                w.reported = true;
                w.from_ms = turn;
                w.answered = 0;
                (void)snprintf(w.where, sizeof(w.where), "%s", where);
            }
            logged_ms = now;
            fgx_warn("controld's control loop has not turned for %.1f s (%s): requests are "
                     "answered with an error meanwhile",
                     (double)(now - turn) / 1000.0, where);
        }
        pthread_mutex_unlock(&w.mtx);
        if (!x && fgx_chan_ctx_open(w.ctl, &x) < 0) {
            x = NULL;
            usleep(WATCH_TICK_MS * 1000);
            continue;
        }
        rv = fgx_chan_ctx_recv(x, &buf, &len, WATCH_RECV_MS);
        if (rv == 0) {
            answer(x, turn);
            free(buf);
        } else if (rv != -ETIMEDOUT) {
            usleep(WATCH_RECV_MS * 1000); /* no spinning on a channel that fails */
        }
    }
    fgx_chan_ctx_close(x);
    return NULL;
}

int ctl_loopwatch_start(struct fgx_chan *ctl)
{
    int rv;

    w.ctl = ctl;
    w.tid = (pid_t)syscall(SYS_gettid);
    __atomic_store_n(&w.turn_ms, mono_ms(), __ATOMIC_RELEASE);
    __atomic_store_n(&w.stop, 0, __ATOMIC_RELEASE);
    rv = pthread_create(&w.thread, NULL, watch_main, NULL);
    if (rv != 0) {
        fgx_err("cannot start the control loop's watch: %s", strerror(rv));
        return -rv;
    }
    w.started = true;
    return 0;
}

void ctl_loopwatch_step(const char *step)
{
    /* a step entered is progress too: a block that ended is over for the thread at once */
    __atomic_store_n(&w.turn_ms, mono_ms(), __ATOMIC_RELEASE);
    __atomic_store_n(&w.request, NULL, __ATOMIC_RELEASE);
    __atomic_store_n(&w.step, step, __ATOMIC_RELEASE);
}

void ctl_loopwatch_request(const char *name)
{
    __atomic_store_n(&w.request, name, __ATOMIC_RELEASE);
}

void ctl_loopwatch_turn(uint64_t now_ms)
{
    char where[320];
    uint64_t from;
    unsigned answered;

    __atomic_store_n(&w.turn_ms, now_ms, __ATOMIC_RELEASE);
    if (!w.started)
        return;
    pthread_mutex_lock(&w.mtx);
    if (!w.reported) {
        pthread_mutex_unlock(&w.mtx);
        return;
    }
    w.reported = false;
    from = w.from_ms;
    answered = w.answered;
    (void)snprintf(where, sizeof(where), "%s", w.where);
    pthread_mutex_unlock(&w.mtx);
    ctl_health_note(0, CTL_HEALTH_WARN, "control-blocked", 0,
                    "controld's control loop was blocked for %.1f s, %u request(s) answered "
                    "with an error meanwhile (%s)",
                    (double)(now_ms - from) / 1000.0, answered, where);
}

void ctl_loopwatch_stop(void)
{
    if (!w.started)
        return;
    __atomic_store_n(&w.stop, 1, __ATOMIC_RELEASE);
    (void)pthread_join(w.thread, NULL);
    w.started = false;
}
