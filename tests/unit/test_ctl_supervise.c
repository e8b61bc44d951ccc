/* Unit tests for controld/ctl_supervise.c (and ctl_worker_restart() in ctl_apply.c) with real
 * child processes: stand-in workers are small shell scripts that never speak the data-path
 * protocol, so these tests cover the process life cycle (crash backoff, a requested restart
 * without backoff, SIGKILL for a worker that ignores SIGTERM, the restart count). The pushes are
 * tested against a thread of this process that serves the channel with the workers' own
 * control code (fgx_wctl_serve, real databases). */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <netinet/in.h>
#include <pthread.h>

#include "controld/ctl_apply.h"
#include "controld/ctl_supervise.h"
#include "fgx/chan.h"
#include "fgx/log.h"
#include "fgx/ruleset.h"
#include "fgx/wcfg.h"
#include "fgx/wctl.h"

static char dir[64], script[128];
static struct ctl_sup *sup;

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void write_script(const char *body)
{
    FILE *f;

    snprintf(script, sizeof(script), "%s/worker.sh", dir);
    f = fopen(script, "w");
    cr_assert_not_null(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(chmod(script, 0755), 0);
}

static void start(const char *body)
{
    write_script(body);
    cr_assert_eq(ctl_sup_start(
                     &(struct ctl_sup_config){
                         .run_dir = dir, .worker_path = script, .log_level = "error", .threads = 1},
                     &sup),
                 0);
}

static void setup(void)
{
    fgx_log_init("test", FGX_LOG_ERROR);
    snprintf(dir, sizeof(dir), "/tmp/fgx-test-sup-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char path[160];

    ctl_sup_stop(sup);
    sup = NULL;
    unlink(script);
    snprintf(path, sizeof(path), "%s/nfq.sock", dir);
    unlink(path);
    rmdir(dir);
}

TestSuite(ctl_supervise, .init = setup, .fini = teardown);

/* Poll until a new worker process is spawned; returns the ms it took, or fails after max_ms. */
static uint64_t wait_respawn(uint64_t max_ms)
{
    uint64_t t0 = now_ms();

    for (;;) {
        bool respawned = false;

        cr_assert_eq(ctl_sup_poll(sup, &respawned), 0);
        if (respawned)
            return now_ms() - t0;
        cr_assert_lt(now_ms() - t0, max_ms, "no respawn within %llu ms",
                     (unsigned long long)max_ms);
        usleep(5000);
    }
}

/* Poll /proc/PID/status until the process ignores SIGTERM (its SigIgn mask), or fail after
 * max_ms: a shell's trap is in place only once it ran that far. */
static void wait_ignores_term(pid_t pid, uint64_t max_ms)
{
    uint64_t t0 = now_ms();
    char path[64], line[128];

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    for (;;) {
        unsigned long long ign = 0;
        FILE *f = fopen(path, "r");

        cr_assert_not_null(f, "%s: %s", path, strerror(errno));
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "SigIgn: %llx", &ign) == 1)
                break;
        cr_assert_eq(fclose(f), 0);
        if (ign & (1ull << (SIGTERM - 1)))
            return;
        cr_assert_lt(now_ms() - t0, max_ms, "pid %d does not ignore SIGTERM after %llu ms",
                     (int)pid, (unsigned long long)max_ms);
        usleep(5000);
    }
}

static void kill9(void)
{
    struct ctl_sup_info info;

    ctl_sup_info(sup, &info);
    cr_assert_gt(info.pid, 0);
    cr_assert_eq(kill(info.pid, SIGKILL), 0);
}

Test(ctl_supervise, requested_restart_skips_backoff, .timeout = 30)
{
    struct ctl_sup_info a, b;
    uint64_t ms;

    start("exec sleep 60");
    ctl_sup_info(sup, &a);
    cr_assert_gt(a.pid, 0);
    cr_assert_str_eq(a.state, "starting", "no ruleset acknowledged yet");
    cr_assert_eq(a.restarts, 0);
    cr_assert_gt(a.started, 0);

    /* Crashes double the backoff: 100, 200, 400, 800 ms; the next is capped at 1000. */
    for (int i = 0; i < 4; i++) {
        kill9();
        wait_respawn(5000);
    }
    ctl_sup_info(sup, &a);
    cr_assert_eq(a.restarts, 4);

    cr_assert_eq(ctl_sup_restart(sup), 0);
    ms = wait_respawn(5000);
    cr_assert_lt(ms, 800, "a requested restart waits for no backoff (%llu ms)",
                 (unsigned long long)ms);
    ctl_sup_info(sup, &b);
    cr_assert_neq(b.pid, a.pid);
    cr_assert_eq(b.restarts, 5, "a requested restart counts as a restart");
    cr_assert_eq(b.instance, a.instance + 1);

    /* ... and leaves the crash backoff where it was (at its 1000 ms cap, not reset), so that
     * a crash loop never spins, and never keeps filtering down for much more than a second. */
    kill9();
    ms = wait_respawn(5000);
    cr_assert_geq(ms, 900, "crash backoff kept (%llu ms)", (unsigned long long)ms);
    cr_assert_lt(ms, 1600, "crash backoff capped at 1 s (%llu ms)", (unsigned long long)ms);
}

/* A worker that answers no heartbeat (this one never even dials, and ignores SIGTERM) hands
 * nothing over and would ignore a SIGTERM: a requested restart kills it at once (issue 24). */
Test(ctl_supervise, restart_kills_a_worker_that_does_not_answer, .timeout = 30)
{
    struct ctl_sup_info a, b;
    uint64_t ms;

    start("trap '' TERM\nwhile :; do sleep 0.05; done");
    ctl_sup_info(sup, &a);
    /* the trap in place, or a SIGTERM alone would end it and prove nothing */
    wait_ignores_term(a.pid, 5000);
    cr_assert_eq(ctl_sup_restart(sup), 0);
    ms = wait_respawn(6000);
    cr_assert_lt(ms, 1500, "killed without waiting for a SIGTERM grace (%llu ms)",
                 (unsigned long long)ms);
    ctl_sup_info(sup, &b);
    cr_assert_neq(b.pid, a.pid);
    cr_assert_eq(b.restarts, 1);
    cr_assert_not_null(strstr(b.replaced_why, "heartbeat"), "%s", b.replaced_why);
}

/* A worker that never answers a heartbeat is replaced once its start's grace is over. */
Test(ctl_supervise, silent_worker_replaced_after_its_grace, .timeout = 30)
{
    struct ctl_sup_info a, b;
    uint64_t ms;

    start("exec sleep 60");
    ctl_sup_info(sup, &a);
    ms = wait_respawn(9000);
    cr_assert_geq(ms, 4500, "a new worker has its grace (%llu ms)", (unsigned long long)ms);
    ctl_sup_info(sup, &b);
    cr_assert_neq(b.pid, a.pid);
    cr_assert_not_null(strstr(b.replaced_why, "no heartbeat within"), "%s", b.replaced_why);
}

Test(ctl_supervise, down_worker_restarted_on_request, .timeout = 30)
{
    struct ctl_sup_info info;
    bool respawned;
    uint64_t t0;

    start("exit 3");
    /* It exits at once, again and again, with a growing backoff (100, 200, then 400 ms). */
    wait_respawn(5000);
    wait_respawn(5000);
    t0 = now_ms();
    do {
        cr_assert_lt(now_ms() - t0, 2000, "never seen down");
        usleep(5000);
        cr_assert_eq(ctl_sup_poll(sup, &respawned), 0);
        cr_assert_not(respawned, "the 400 ms backoff cannot have passed yet");
        ctl_sup_info(sup, &info);
    } while (info.pid != 0);
    cr_assert_str_eq(info.state, "down");
    cr_assert_eq(ctl_sup_restart(sup), 0);
    cr_assert_lt(wait_respawn(5000), 100, "down and asked: at the next poll");
}

/* ctl_worker_restart() waits for the new process's ACK; a stand-in never sends one, so it
 * times out, and marks the worker stale so that the control loop keeps pushing. */
Test(ctl_supervise, worker_restart_waits_for_ack, .timeout = 30)
{
    struct ctl_ctx ctx = {0};
    struct ctl_sup_info a, b;
    uint64_t t0;
    char path[160];

    start("exec sleep 60");
    cr_assert_eq(ctl_store_open(dir, 0, &ctx.store), 0);
    cr_assert_eq(ctl_stats_open(ctx.store, &ctx.stats), 0);
    ctx.sup = sup;
    ctl_sup_info(sup, &a);
    t0 = now_ms();
    cr_assert_eq(ctl_worker_restart(&ctx, 700), -ETIMEDOUT);
    cr_assert_geq(now_ms() - t0, 650);
    cr_assert_lt(now_ms() - t0, 3000);
    cr_assert(ctx.worker_stale);
    ctl_sup_info(sup, &b);
    cr_assert_neq(b.pid, a.pid, "restarted even so");
    cr_assert_gt(b.pid, 0);
    cr_assert_eq(b.restarts, 1);
    cr_assert_str_eq(b.state, "starting");

    ctx.sup = NULL;
    cr_assert_eq(ctl_worker_restart(&ctx, 100), -ENOTCONN, "no supervisor, nothing to restart");
    ctl_ctx_release(&ctx);
    ctl_stats_free(ctx.stats);
    ctl_store_close(ctx.store);
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/lock.mdb", dir);
    unlink(path);
}

/* ---- pushes: a worker's control side in a thread ---- */

static struct {
    pthread_t tid;
    struct fgx_chan *ch;
    struct fgx_wcfg *current;
    int stop;
    pthread_mutex_t lock;
    size_t lens[16];
    size_t nlens;
    unsigned delay_ms; /* before each answer */
    size_t answer_max; /* 0: every message is answered; else only the first answer_max */
} fw = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void *fw_thread(void *arg)
{
    const struct fgx_wctl ctl = {.nthreads = 0, .current = &fw.current, .stop = &fw.stop};

    (void)arg;
    while (!__atomic_load_n(&fw.stop, __ATOMIC_ACQUIRE)) {
        void *buf = NULL;
        size_t len = 0;

        if (fgx_chan_recv(fw.ch, &buf, &len, 50) != 0)
            continue;
        size_t n;

        pthread_mutex_lock(&fw.lock);
        if (fw.nlens < 16)
            fw.lens[fw.nlens++] = len;
        n = fw.nlens;
        pthread_mutex_unlock(&fw.lock);
        usleep(__atomic_load_n(&fw.delay_ms, __ATOMIC_ACQUIRE) * 1000u);
        if (fw.answer_max != 0 && n > __atomic_load_n(&fw.answer_max, __ATOMIC_ACQUIRE)) {
            free(buf); /* a worker that hangs after its refusal */
            continue;
        }
        fgx_wctl_serve(&ctl, fw.ch, buf, len);
    }
    return NULL;
}

static size_t fw_len(size_t i)
{
    size_t n;

    pthread_mutex_lock(&fw.lock);
    cr_assert_lt(i, fw.nlens, "message %zu never came", i);
    n = fw.lens[i];
    pthread_mutex_unlock(&fw.lock);
    return n;
}

static size_t fw_count(void)
{
    size_t n;

    pthread_mutex_lock(&fw.lock);
    n = fw.nlens;
    pthread_mutex_unlock(&fw.lock);
    return n;
}

/* The stand-in worker process (it never speaks) and, on its channel, the control side in a
 * thread of this process. */
static void fw_start(void)
{
    char url[128];

    start("exec sleep 60");
    snprintf(url, sizeof(url), "ipc://%s/nfq.sock", dir);
    cr_assert_eq(fgx_chan_dial(url, FGX_CHAN_REP, 0, &fw.ch), 0);
    cr_assert_eq(pthread_create(&fw.tid, NULL, fw_thread, NULL), 0);
}

static void fw_stop(void)
{
    __atomic_store_n(&fw.stop, 1, __ATOMIC_RELEASE);
    pthread_join(fw.tid, NULL);
    fgx_chan_close(fw.ch);
    fgx_wcfg_unref(fw.current);
}

static void compile(uint32_t id, const char *re, struct fgx_blob *out)
{
    const struct fgx_pattern p = {id, re, FGX_DIR_C2S, false};
    char err[256];

    cr_assert_eq(fgx_ruleset_compile(&p, 1, FGX_DIR_C2S, IPPROTO_TCP, out, err, sizeof(err)), 0,
                 "%s", err);
}

/* A database the worker acknowledged travels as its hash next time; a worker that lost it
 * refuses, and gets the ruleset again in full. */
Test(ctl_supervise, pushes_send_held_databases_as_their_hash, .timeout = 30)
{
    struct fgx_dp_service svc[2];
    struct fgx_dp_ruleset rs = {.services = svc};
    struct fgx_blob a, b;
    fw_start();
    compile(1, "evil[0-9]+", &a);
    compile(2, "zzz+", &b);
    memset(svc, 0, sizeof(svc));
    svc[0] = (struct fgx_dp_service){.id = 1, .ipproto = IPPROTO_TCP, .port = 80};
    svc[0].db[0] = a;
    svc[1] = (struct fgx_dp_service){.id = 2, .ipproto = IPPROTO_TCP, .port = 81};
    svc[1].db[0] = b;

    rs.generation = 1;
    rs.nservices = 1;
    cr_assert_eq(ctl_sup_push(sup, &rs, ctl_sup_now_ms() + 5000), 0);
    cr_assert_gt(fw_len(0), a.len, "first push: the database in full");

    rs.generation = 2;
    cr_assert_eq(ctl_sup_push(sup, &rs, ctl_sup_now_ms() + 5000), 0);
    cr_assert_lt(fw_len(1), 64, "second push: %zu bytes, the database again", fw_len(1));
    cr_assert_eq(fw.current->generation, 2);
    cr_assert_not_null(fw.current->svc[0].db[0]);
    cr_assert_eq(fw.current->svc[0].db[0]->hash, a.hash);

    /* The worker lost what controld believes it holds. */
    fgx_wcfg_unref(__atomic_exchange_n(&fw.current, NULL, __ATOMIC_ACQ_REL));
    rs.generation = 3;
    rs.nservices = 2;
    cr_assert_eq(ctl_sup_push(sup, &rs, ctl_sup_now_ms() + 5000), 0);
    cr_assert_eq(fw_count(), 4, "refused, then sent again");
    cr_assert_lt(fw_len(2), b.len + 64, "a's database left out at first");
    cr_assert_gt(fw_len(3), a.len + b.len, "then everything");
    cr_assert_eq(fw.current->generation, 3);
    cr_assert_not_null(fw.current->svc[0].db[0]);
    cr_assert_not_null(fw.current->svc[1].db[0]);

    fw_stop();
    fgx_blob_release(&a);
    fgx_blob_release(&b);
}

/* A push is bounded by one deadline, whatever it takes: a slow worker that refuses the push by
 * hash (it lost a database) and then never answers the full one held the control loop for
 * both calls' timeouts, one after the other; now for the deadline (and no more than the floor
 * of a last call past it). */
Test(ctl_supervise, a_push_has_one_deadline_for_all_its_calls, .timeout = 30)
{
    struct fgx_dp_service svc = {.id = 1, .ipproto = IPPROTO_TCP, .port = 80};
    struct fgx_dp_ruleset rs = {.services = &svc, .nservices = 1, .generation = 1};
    struct fgx_blob a;
    uint64_t t0, took;
    fw_start();
    compile(1, "evil[0-9]+", &a);
    svc.db[0] = a;
    cr_assert_eq(ctl_sup_push(sup, &rs, ctl_sup_now_ms() + 5000), 0);
    cr_assert_eq(fw_count(), 1);

    /* It loses the database, answers the stripped push after 700 ms, then hangs. */
    fgx_wcfg_unref(__atomic_exchange_n(&fw.current, NULL, __ATOMIC_ACQ_REL));
    __atomic_store_n(&fw.answer_max, 2, __ATOMIC_RELEASE);
    __atomic_store_n(&fw.delay_ms, 700, __ATOMIC_RELEASE);
    rs.generation = 2;
    t0 = now_ms();
    cr_assert_eq(ctl_sup_push(sup, &rs, t0 + 1000), -ETIMEDOUT);
    took = now_ms() - t0;
    cr_assert_eq(fw_count(), 3, "refused, then sent again in full");
    cr_assert_geq(took, 950, "gave up after %llu ms, before its deadline",
                  (unsigned long long)took);
    cr_assert_lt(took, 1400, "the push took %llu ms for a deadline of 1000 ms",
                 (unsigned long long)took);

    /* Past its deadline a call still gets the floor: a worker that answers at once is heard. */
    __atomic_store_n(&fw.answer_max, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&fw.delay_ms, 0, __ATOMIC_RELEASE);
    usleep(800000); /* the stand-in's last delay (the dropped message's) runs out */
    rs.generation = 3;
    cr_assert_eq(ctl_sup_push(sup, &rs, now_ms() - 1), 0);
    cr_assert_eq(fw.current->generation, 3);

    fw_stop();
    fgx_blob_release(&a);
}
