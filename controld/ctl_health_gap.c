/* controld's health log, the workers' gaps (ctl_health_gap.h). A gap is counted from the first
 * turn the supervisor reports its worker not running (after it ran once: the start of controld
 * is no gap) to the first turn it runs again with its ruleset acknowledged. The services are
 * read when the gap starts: those are the ones whose traffic it concerns. */
#include "controld/ctl_health_gap.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "controld/ctl_health.h"

#define GAP_SERVICES_MAX 256

struct gap {
    const char *worker; /* "nfq worker", "proxy worker" */
    bool ran;           /* it ran once: a later "not running" is a gap */
    bool open;          /* in a gap now */
    uint64_t since_ms;
    uint32_t ids[GAP_SERVICES_MAX]; /* the services the gap concerns */
    char names[GAP_SERVICES_MAX][CTL_NAME_MAX + 1];
    size_t n;
};

static struct gap gaps[2] = {{.worker = "nfq worker"}, {.worker = "proxy worker"}};

void ctl_health_gap_reset(void)
{
    for (size_t i = 0; i < 2; i++) {
        const char *w = gaps[i].worker;

        memset(&gaps[i], 0, sizeof(gaps[i]));
        gaps[i].worker = w;
    }
}

/* Which worker carries a service's traffic: 0 the nfq worker, 1 the proxy worker, -1 none. */
static int worker_of(const struct ctl_service *s)
{
    if (!s->active || s->layer == CTL_LAYER_EXTERNAL)
        return -1;
    return s->layer == CTL_LAYER_PROXY ? 1 : 0;
}

static void gap_open(struct ctl_ctx *ctx, int k, struct gap *g, uint64_t now_ms)
{
    struct ctl_service *svcs = NULL;
    struct ctl_txn *t;
    size_t n = 0;

    g->open = true;
    g->since_ms = now_ms;
    g->n = 0;
    if (ctl_txn_begin(ctx->store, false, &t) < 0)
        return;
    if (ctl_store_service_list(t, &svcs, &n) < 0)
        n = 0;
    ctl_txn_abort(t);
    for (size_t i = 0; i < n && g->n < GAP_SERVICES_MAX; i++) {
        if (worker_of(&svcs[i]) != k)
            continue;
        g->ids[g->n] = svcs[i].id;
        memcpy(g->names[g->n], svcs[i].name, sizeof(g->names[g->n]));
        g->n++;
        if (svcs[i].fail_open)
            ctl_health_note(svcs[i].id, CTL_HEALTH_ERROR, "unfiltered", 0,
                            "service %s passes unfiltered (fail_open): the %s is down",
                            svcs[i].name, g->worker);
        else
            ctl_health_note(svcs[i].id, CTL_HEALTH_WARN, "not-served", 0,
                            "service %s is not served (fail-closed): the %s is down", svcs[i].name,
                            g->worker);
    }
    free(svcs);
}

static void gap_close(struct gap *g, uint64_t now_ms)
{
    for (size_t i = 0; i < g->n; i++)
        ctl_health_note(g->ids[i], CTL_HEALTH_INFO, "filtered-again", 0,
                        "service %s filtered again: the %s is back after %llu ms", g->names[i],
                        g->worker, (unsigned long long)(now_ms - g->since_ms));
    g->open = false;
    g->n = 0;
}

void ctl_health_gap_poll(struct ctl_ctx *ctx, uint64_t now_ms)
{
    struct ctl_sup *sups[2] = {ctx->sup, ctx->px_sup};

    for (int k = 0; k < 2; k++) {
        struct gap *g = &gaps[k];
        struct ctl_sup_info info;
        bool running;

        if (!sups[k])
            continue;
        ctl_sup_info(sups[k], &info);
        running = strcmp(info.state, "running") == 0;
        if (running) {
            if (g->open)
                gap_close(g, now_ms);
            g->ran = true;
        } else if (g->ran && !g->open) {
            gap_open(ctx, k, g, now_ms);
        }
    }
}
