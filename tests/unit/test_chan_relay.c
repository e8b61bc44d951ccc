/* Unit tests for the relay into a REP channel (libcommon/chan.c, fgx/chan_relay.h): a relayed
 * request reaches the receiver with the address it was sent for, never as the local peer; a
 * request on the channel's own ipc:// listener stays local; async calls are answered each on
 * its own, out of order. */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgx/chan.h"
#include "fgx/chan_relay.h"
#include "fgx/chan_tls.h"

struct done {
    pthread_mutex_t mtx;
    pthread_cond_t cv;
    int n, rv;
    char reply[64];
};

static void on_done(void *arg, int rv, void *reply, size_t len)
{
    struct done *d = arg;

    pthread_mutex_lock(&d->mtx);
    d->rv = rv;
    if (reply)
        snprintf(d->reply, sizeof(d->reply), "%.*s", (int)len, (const char *)reply);
    free(reply);
    d->n++;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mtx);
}

static void wait_done(struct done *d)
{
    pthread_mutex_lock(&d->mtx);
    while (d->n == 0)
        pthread_cond_wait(&d->cv, &d->mtx);
    pthread_mutex_unlock(&d->mtx);
}

#define DONE_INIT                                                                                  \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, ""                              \
    }

Test(chan_relay, relayed_requests_carry_their_peer_and_are_answered_out_of_order)
{
    char url[128];
    struct fgx_chan *rep, *relay;
    struct fgx_peer p1 = {.family = 4, .addr = {10, 77, 0, 2}, .port = 40000};
    struct fgx_peer p2 = {.family = 6, .addr = {0xfd, 0x77, [15] = 2}, .port = 40001};
    struct fgx_peer got1, got2;
    struct fgx_chan_req *r1, *r2;
    struct done d1 = DONE_INIT, d2 = DONE_INIT;
    void *buf;
    size_t len;

    snprintf(url, sizeof(url), "ipc:///tmp/fgx-test-relay-%d.sock", getpid());
    cr_assert_eq(fgx_chan_listen(url, FGX_CHAN_REP, &rep), 0);
    cr_assert_eq(fgx_chan_listen_relay(rep, "inproc://fgx-test-relay"), 0);
    cr_assert_eq(fgx_chan_dial("inproc://fgx-test-relay", FGX_CHAN_REQ, 1000, &relay), 0);
    cr_assert_eq(fgx_chan_call_async(relay, &p1, "one", 3, 5000, on_done, &d1), 0);
    cr_assert_eq(fgx_chan_call_async(relay, &p2, "two", 3, 5000, on_done, &d2), 0);

    cr_assert_eq(fgx_chan_recv_req(rep, &buf, &len, 2000, &got1, &r1), 0);
    cr_assert_eq(len, 3);
    cr_assert_eq(memcmp(buf, "one", 3) == 0 || memcmp(buf, "two", 3) == 0, 1,
                 "the header is stripped");
    free(buf);
    cr_assert_eq(fgx_chan_recv_req(rep, &buf, &len, 2000, &got2, &r2), 0);
    free(buf);
    /* each arrives as its own sender: 4 with 10.77.0.2, 6 with fd77::2 */
    cr_assert(got1.family != got2.family);
    for (int i = 0; i < 2; i++) {
        const struct fgx_peer *g = i ? &got2 : &got1;
        const struct fgx_peer *want = g->family == 4 ? &p1 : &p2;

        cr_assert_eq(memcmp(g->addr, want->addr, 16), 0);
        cr_assert_eq(g->port, want->port);
    }
    /* answered in reverse order: each call gets its own reply */
    cr_assert_eq(fgx_chan_reply(rep, r2, got2.family == 4 ? "re-one" : "re-two", 6, 1000), 0);
    cr_assert_eq(fgx_chan_reply(rep, r1, got1.family == 4 ? "re-one" : "re-two", 6, 1000), 0);
    wait_done(&d1);
    wait_done(&d2);
    cr_assert_eq(d1.rv, 0);
    cr_assert_str_eq(d1.reply, "re-one");
    cr_assert_str_eq(d2.reply, "re-two");
    cr_assert_eq(fgx_chan_calls(relay), 0);
    fgx_chan_close(relay);
    fgx_chan_close(rep);
}

Test(chan_relay, own_listener_stays_local_and_a_short_relayed_message_is_nobody)
{
    char url[128];
    struct fgx_chan *rep, *local, *raw;
    struct fgx_peer got;
    struct fgx_chan_req *r;
    void *buf, *reply;
    size_t len, rlen;

    snprintf(url, sizeof(url), "ipc:///tmp/fgx-test-relay2-%d.sock", getpid());
    cr_assert_eq(fgx_chan_listen(url, FGX_CHAN_REP, &rep), 0);
    cr_assert_eq(fgx_chan_listen_relay(rep, "inproc://fgx-test-relay2"), 0);
    cr_assert_eq(fgx_chan_dial(url, FGX_CHAN_REQ, 1000, &local), 0);
    cr_assert_eq(fgx_chan_send(local, "hello", 5, 1000), 0);
    cr_assert_eq(fgx_chan_recv_req(rep, &buf, &len, 2000, &got, &r), 0);
    cr_assert_eq(got.family, 0, "the ipc socket is the local peer");
    cr_assert_eq(len, 5);
    free(buf);
    cr_assert_eq(fgx_chan_reply(rep, r, "ok", 2, 1000), 0);
    cr_assert_eq(fgx_chan_recv(local, &reply, &rlen, 1000), 0);
    free(reply);

    /* a plain sender on the relay with no header: never local, never a made-up address */
    cr_assert_eq(fgx_chan_dial("inproc://fgx-test-relay2", FGX_CHAN_REQ, 1000, &raw), 0);
    cr_assert_eq(fgx_chan_send(raw, "x", 1, 1000), 0);
    cr_assert_eq(fgx_chan_recv_req(rep, &buf, &len, 2000, &got, &r), 0);
    cr_assert_eq(got.family, -1);
    cr_assert_eq(len, 0);
    free(buf);
    cr_assert_eq(fgx_chan_reply(rep, r, "", 0, 1000), 0);
    fgx_chan_close(raw);
    fgx_chan_close(local);
    fgx_chan_close(rep);
}

Test(chan_relay, a_call_ends_when_the_channel_closes)
{
    struct fgx_chan *rep, *relay;
    struct fgx_peer p = {.family = 4, .addr = {10, 0, 0, 1}};
    struct done d = DONE_INIT;

    cr_assert_eq(fgx_chan_listen("inproc://fgx-test-relay3-own", FGX_CHAN_REP, &rep), 0);
    cr_assert_eq(fgx_chan_listen_relay(rep, "inproc://fgx-test-relay3"), 0);
    cr_assert_eq(fgx_chan_dial("inproc://fgx-test-relay3", FGX_CHAN_REQ, 1000, &relay), 0);
    cr_assert_eq(fgx_chan_call_async(relay, &p, "q", 1, 60000, on_done, &d), 0);
    fgx_chan_close(relay); /* waits for the callback */
    cr_assert_eq(d.n, 1);
    cr_assert_lt(d.rv, 0);
    fgx_chan_close(rep);
}
