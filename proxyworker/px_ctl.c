/* Control stage of proxyworker: the thread that talks to controld, with the NFQUEUE worker's
 * protocol (fgx/dp.h). It loads each pushed ruleset off the event loops, publishes it with one
 * pointer store, wakes every loop and acknowledges only once each uses it; it also answers
 * statistics requests with the counters and the match events since the previous one. */
#include "px.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fgx/chan.h"
#include "fgx/log.h"

#define RECV_TIMEOUT_MS 500
#define SEND_TIMEOUT_MS 5000

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Publish c (the caller's reference moves to w->current), wake every thread and wait until all
 * use it. The old config's reference is dropped only then: a thread that loaded the old
 * pointer may still be taking its own reference on it until it reports the new one. */
static int publish(struct px_worker *w, struct fgx_wcfg *c)
{
    struct fgx_wcfg *old = __atomic_exchange_n(&w->current, c, __ATOMIC_ACQ_REL);
    unsigned i;

    for (i = 0; i < w->nthreads; i++)
        px_thread_wake(&w->threads[i]);
    for (i = 0; i < w->nthreads;) {
        if (__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
            fgx_wcfg_unref(old);
            return -ECANCELED;
        }
        if (!w->threads[i].started ||
            __atomic_load_n(&w->threads[i].applied, __ATOMIC_ACQUIRE) == c) {
            i++;
            continue;
        }
        sleep_ms(1);
    }
    fgx_wcfg_unref(old);
    return 0;
}

int px_ctl_apply(struct px_worker *w, const struct fgx_dp_ruleset *rs)
{
    struct fgx_wcfg *c = NULL;
    size_t i;
    int ret;

    /* The proxy carries TCP only (controld refuses a UDP service on this layer): a UDP one
     * here is a controld bug, said once and otherwise ignored by the lookups. */
    for (i = 0; i < rs->nservices; i++)
        if (rs->services[i].ipproto != IPPROTO_TCP)
            fgx_warn("generation %llu: service %u is not TCP and is ignored by the proxy",
                     (unsigned long long)rs->generation, rs->services[i].id);
    ret = fgx_wcfg_build(rs, w->current, &c);
    if (ret != 0)
        return ret;
    return publish(w, c);
}

static void on_ruleset(struct px_worker *w, const struct fgx_dp_ruleset *rs,
                       struct fgx_dp_msg *reply)
{
    char *err;
    int ret;

    ret = px_ctl_apply(w, rs);
    if (ret == 0) {
        fgx_info("generation %llu applied: %zu service(s)", (unsigned long long)rs->generation,
                 rs->nservices);
        reply->type = FGX_DP_ACK;
        reply->u.ack_generation = rs->generation;
        return;
    }
    reply->type = FGX_DP_ERROR;
    if (asprintf(&err, "generation %llu not applied: %s", (unsigned long long)rs->generation,
                 strerror(-ret)) == -1)
        err = NULL;
    reply->u.error = err;
}

static void serve_one(struct px_worker *w, struct fgx_chan *ch, const void *buf, size_t len)
{
    struct fgx_dp_msg req = {0}, reply = {0};
    void *out = NULL;
    size_t outlen = 0;
    int ret;

    ret = fgx_dp_decode(buf, len, &req);
    if (ret != 0) {
        fgx_warn("control: undecodable message of %zu bytes", len);
        reply.type = FGX_DP_ERROR;
        reply.u.error = strdup("undecodable message");
    } else if (req.type == FGX_DP_RULESET) {
        on_ruleset(w, &req.u.ruleset, &reply);
    } else if (req.type == FGX_DP_STATS_REQUEST) {
        reply.type = FGX_DP_STATS;
        if (px_stats_collect(w, &reply.u.stats) != 0) {
            reply.type = FGX_DP_ERROR;
            reply.u.error = strdup("out of memory");
        }
    } else {
        reply.type = FGX_DP_ERROR;
        reply.u.error = strdup("unexpected message type");
    }
    fgx_dp_msg_release(&req);
    ret = fgx_dp_encode(&reply, &out, &outlen);
    fgx_dp_msg_release(&reply);
    if (ret != 0) {
        fgx_err("control: cannot encode a reply: %s", strerror(-ret));
        return;
    }
    ret = fgx_chan_send(ch, out, outlen, SEND_TIMEOUT_MS);
    if (ret != 0)
        fgx_warn("control: reply not sent: %s", strerror(-ret));
    free(out);
}

int px_ctl_run(struct px_worker *w, const char *url)
{
    struct fgx_chan *ch = NULL;
    int ret;

    ret = fgx_chan_dial(url, FGX_CHAN_REP, 0, &ch);
    if (ret != 0) {
        fgx_err("control: cannot dial %s: %s", url, strerror(-ret));
        return ret;
    }
    /* Serve until told to stop. A vanished controld is only silence: relaying goes on with the
     * last ruleset and nng dials again in the background. */
    while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
        void *buf = NULL;
        size_t len = 0;

        ret = fgx_chan_recv(ch, &buf, &len, RECV_TIMEOUT_MS);
        if (ret == -ETIMEDOUT)
            continue;
        if (ret != 0) {
            sleep_ms(100);
            continue;
        }
        serve_one(w, ch, buf, len);
        free(buf);
    }
    fgx_chan_close(ch);
    return 0;
}
