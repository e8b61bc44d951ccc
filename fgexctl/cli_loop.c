/* fgexctl polling stage: `stats --watch` redraws the stats table every interval with rates,
 * `events --follow` prints the events that are new since the last poll. Both poll controld,
 * which keeps the counters and the event history; nothing here keeps more than one answer. */
#include "cli_loop.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_fmt.h"
#include "cli_rpc.h"
#include "cmd.h"

/* Clear the screen and go home, for a terminal only: a pipe or file gets one frame after
 * another. */
#define ANSI_CLEAR "\033[H\033[2J"

struct loop {
    const struct cli_cmd *cmd;
    FILE *out;
    struct cli_rpc rpc;
    sigset_t sigs; /* SIGINT, SIGTERM: blocked, waited for between polls */
    bool failing;  /* the last poll could not reach controld (reported once) */
};

static uint64_t now_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Sleep until the monotonic time deadline. Returns true when SIGINT or SIGTERM came first. */
static bool loop_wait(struct loop *l, uint64_t deadline)
{
    for (;;) {
        uint64_t now = now_ns();
        struct timespec rel;

        /* A signal that came during the poll is pending: take it before sleeping on. */
        if (now >= deadline) {
            rel.tv_sec = 0;
            rel.tv_nsec = 0;
        } else {
            rel.tv_sec = (time_t)((deadline - now) / 1000000000u);
            rel.tv_nsec = (long)((deadline - now) % 1000000000u);
        }
        if (sigtimedwait(&l->sigs, NULL, &rel) != -1)
            return true;
        if (errno == EAGAIN)
            return false;
        /* EINTR: another signal (SIGWINCH, SIGCONT); wait the rest. */
    }
}

/* One poll. Returns 0 with *out set, -EAGAIN when controld could not be reached (reported
 * once, to be retried), or the exit status (> 0) for an answer that ends the loop: an error
 * reply. */
static int loop_poll(struct loop *l, const Fgx__Ctl__Request *req, Fgx__Ctl__Reply **out)
{
    Fgx__Ctl__Reply *rep = NULL;
    int status;

    if (cli_rpc_request(&l->rpc, req, CLI_LOOP_TIMEOUT_MS, &rep) < 0) {
        if (!l->failing)
            (void)fprintf(stderr, CLI_PROG ": %s; retrying\n", l->rpc.err);
        l->failing = true;
        return -EAGAIN;
    }
    if (l->failing)
        (void)fprintf(stderr, CLI_PROG ": connected to controld at %s again\n", l->rpc.url);
    l->failing = false;
    if (rep->code != FGX__CTL__CODE__CODE_OK) {
        /* No such service, or controld failed: asking again would say the same. */
        cli_fmt_error_at(stderr, rep, l->rpc.url);
        status = cli_fmt_exit_code(rep->code);
        fgx__ctl__reply__free_unpacked(rep, NULL);
        return status == CLI_EXIT_OK ? CLI_EXIT_ERROR : status;
    }
    *out = rep;
    return 0;
}

/* Render one human refresh whole, then write it at once, so the terminal never shows half a
 * table. */
static int watch_frame(struct loop *l, const Fgx__Ctl__Reply *cur, const Fgx__Ctl__Reply *prev,
                       double secs)
{
    struct timespec ts;
    char *frame = NULL, when[64];
    size_t len = 0;
    FILE *f = open_memstream(&frame, &len);
    bool tty = isatty(fileno(l->out)) == 1;
    int rc;

    if (!f)
        return -ENOMEM;
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    cli_fmt_time((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec, false, when,
                 sizeof(when));
    (void)fprintf(f, "every %gs  %s\n\n", l->cmd->interval_ms / 1000.0, when);
    rc = cli_cmd_stats_watch(f, cur, prev, secs);
    if (fclose(f) == EOF && rc == 0)
        rc = -ENOMEM;
    if (rc == 0) {
        if (tty)
            (void)fputs(ANSI_CLEAR, l->out);
        (void)fwrite(frame, 1, len, l->out);
        if (!tty)
            (void)fputc('\n', l->out);
        if (fflush(l->out) == EOF || ferror(l->out))
            rc = -EIO;
    }
    free(frame);
    return rc;
}

static int loop_watch(struct loop *l)
{
    const struct cli_cmd *cmd = l->cmd;
    Fgx__Ctl__Reply *prev = NULL, *cur = NULL;
    uint64_t period = (uint64_t)cmd->interval_ms * 1000000u, next = now_ns(), prev_t = 0;
    int status = CLI_EXIT_OK, rc;

    for (;;) {
        rc = loop_poll(l, &cmd->req, &cur);
        if (rc > 0) {
            status = rc;
            break;
        }
        if (rc == 0) {
            uint64_t t = now_ns();

            if (cmd->json)
                rc = cli_fmt_reply(l->out, &cmd->req, cur, true);
            else
                rc = watch_frame(l, cur, prev, prev ? (double)(t - prev_t) / 1e9 : 0);
            if (prev)
                fgx__ctl__reply__free_unpacked(prev, NULL);
            prev = cur;
            prev_t = t;
            cur = NULL;
            if (rc < 0) {
                (void)fprintf(stderr, CLI_PROG ": cannot write the output\n");
                status = CLI_EXIT_ERROR;
                break;
            }
        }
        /* Keep to the period without drifting; after a slow poll, go on at once. */
        next += period;
        if (next < now_ns())
            next = now_ns();
        if (loop_wait(l, next))
            break;
    }
    if (prev)
        fgx__ctl__reply__free_unpacked(prev, NULL);
    return status;
}

static int loop_follow(struct loop *l)
{
    const struct cli_cmd *cmd = l->cmd;
    Fgx__Ctl__Request req = cmd->req;
    Fgx__Ctl__EventsQuery q = *cmd->req.events;
    Fgx__Ctl__Reply none = FGX__CTL__REPLY__INIT;
    bool first = true;
    uint64_t last = 0, next = now_ns();
    int status = CLI_EXIT_OK, rc;

    req.events = &q;
    /* The header at once, so the user sees it runs even before the first block. */
    if (!cmd->json && cli_cmd_events_follow(l->out, &none, false, true) < 0)
        goto write_err;
    for (;;) {
        Fgx__Ctl__Reply *rep = NULL;

        if (!first) {
            q.has_after_seq = 1;
            q.after_seq = last;
            q.has_limit = 1;
            q.limit = CLI_FOLLOW_BATCH;
        }
        rc = loop_poll(l, &req, &rep);
        if (rc > 0) {
            status = rc;
            break;
        }
        if (rc == 0) {
            Fgx__Ctl__Reply fresh = *rep;
            size_t skip = 0;
            bool full = !first && rep->n_events >= CLI_FOLLOW_BATCH;

            /* controld's history was reset (a new state directory): follow its numbering. */
            if (!first && rep->has_last_seq && rep->last_seq < last)
                last = rep->last_seq;
            /* Never print an event twice, whatever controld sends back. */
            while (!first && skip < rep->n_events && rep->events[skip]->seq <= last)
                skip++;
            fresh.events += skip;
            fresh.n_events -= skip;
            rc = cli_cmd_events_follow(l->out, &fresh, cmd->json, false);
            for (size_t i = 0; i < fresh.n_events; i++)
                if (fresh.events[i]->seq > last)
                    last = fresh.events[i]->seq;
            /* A full batch may have more behind it: go on from what was printed. Else
             * everything up to last_seq was seen (the first answer shows only the newest). */
            if (rep->has_last_seq && !full && rep->last_seq > last)
                last = rep->last_seq;
            first = false;
            fgx__ctl__reply__free_unpacked(rep, NULL);
            if (rc < 0)
                goto write_err;
            /* More may be waiting behind a full batch: ask again at once. */
            if (full)
                next = now_ns() - (uint64_t)CLI_FOLLOW_MS * 1000000u;
        }
        next += (uint64_t)CLI_FOLLOW_MS * 1000000u;
        if (next < now_ns())
            next = now_ns();
        if (loop_wait(l, next))
            break;
    }
    return status;
write_err:
    (void)fprintf(stderr, CLI_PROG ": cannot write the output\n");
    return CLI_EXIT_ERROR;
}

int cli_loop_run(const struct cli_cmd *cmd, FILE *out)
{
    struct loop l;
    int status;

    memset(&l, 0, sizeof(l));
    l.cmd = cmd;
    l.out = out;
    cli_rpc_init(&l.rpc, cmd->url);
    cli_rpc_set_trust(&l.rpc, cmd->fingerprint, cmd->ca);
    (void)sigemptyset(&l.sigs);
    (void)sigaddset(&l.sigs, SIGINT);
    (void)sigaddset(&l.sigs, SIGTERM);
    /* Blocked, not handled: the signal waits for loop_wait() instead of cutting a poll. */
    if (pthread_sigmask(SIG_BLOCK, &l.sigs, NULL) != 0) {
        (void)fprintf(stderr, CLI_PROG ": cannot block SIGINT\n");
        return CLI_EXIT_ERROR;
    }
    status = cmd->follow ? loop_follow(&l) : loop_watch(&l);
    cli_rpc_release(&l.rpc);
    return status;
}

int cli_loop_follow(const struct cli_cmd *cmd, Fgx__Ctl__Request *req, protobuf_c_boolean *has_after,
                    uint64_t *after_seq, unsigned period_ms, cli_loop_follow_fn print)
{
    struct cli_rpc rpc;
    uint64_t last = 0;
    int status = CLI_EXIT_OK;

    cli_rpc_init(&rpc, cmd->url);
    cli_rpc_set_trust(&rpc, cmd->fingerprint, cmd->ca);
    for (;;) {
        Fgx__Ctl__Reply *rep = NULL;
        struct timespec ts = {.tv_sec = period_ms / 1000,
                              .tv_nsec = (long)(period_ms % 1000) * 1000000L};

        if (cli_rpc_request(&rpc, req, CLI_RPC_TIMEOUT_MS, &rep) < 0) {
            (void)fprintf(stderr, CLI_PROG ": %s\n", rpc.err);
            status = CLI_EXIT_ERROR;
            break;
        }
        if (rep->code != FGX__CTL__CODE__CODE_OK) {
            cli_fmt_error(stderr, rep);
            status = cli_fmt_exit_code(rep->code);
            fgx__ctl__reply__free_unpacked(rep, NULL);
            break;
        }
        last = print(cmd, rep, last);
        fgx__ctl__reply__free_unpacked(rep, NULL);
        if (fflush(stdout) == EOF) {
            status = CLI_EXIT_ERROR;
            break;
        }
        *has_after = 1;
        *after_seq = last;
        (void)nanosleep(&ts, NULL);
    }
    cli_rpc_release(&rpc);
    return status;
}
