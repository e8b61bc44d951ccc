/* Unit tests for controld/ctl_supervise.c (and ctl_worker_restart() in ctl_apply.c) with real
 * child processes: stand-in workers are small shell scripts that never speak the data-path
 * protocol, so these tests cover the process life cycle only (crash backoff, a requested
 * restart without backoff, SIGKILL for a worker that ignores SIGTERM, the restart count). */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "controld/ctl_apply.h"
#include "controld/ctl_supervise.h"
#include "fgx/log.h"

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

Test(ctl_supervise, restart_kills_a_worker_ignoring_sigterm, .timeout = 30)
{
    struct ctl_sup_info a, b;
    uint64_t ms;

    start("trap '' TERM\nwhile :; do sleep 0.05; done");
    usleep(200000); /* let the shell install its trap */
    ctl_sup_info(sup, &a);
    cr_assert_eq(ctl_sup_restart(sup), 0);
    ms = wait_respawn(6000);
    cr_assert_geq(ms, 1500, "SIGKILL only after the grace period (%llu ms)",
                  (unsigned long long)ms);
    ctl_sup_info(sup, &b);
    cr_assert_neq(b.pid, a.pid);
    cr_assert_eq(b.restarts, 1);
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
