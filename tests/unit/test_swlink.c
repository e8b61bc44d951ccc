/* Unit tests for the data-path workers' link to scriptworker (libcommon/swlink.c): a real nng
 * pair1 socket stands for scriptworker over inproc. Which files go (SCRIPT / UNSCRIPT) as the
 * ruleset changes and after a reconnect, what recv returns and skips, the log queue's bounds. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>

#include "fgx/swlink.h"

#define URL "inproc://swlink-test"

static nng_socket peer; /* scriptworker's side */
static struct fgx_swlink link;
static struct fgx_wcfg *cfg;

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static void setup(void)
{
    cr_assert_eq(nng_pair1_open(&peer), 0);
    cr_assert_eq(nng_socket_set_ms(peer, NNG_OPT_RECVTIMEO, 2000), 0);
    cr_assert_eq(nng_listen(peer, URL "-7", NULL, 0), 0);
    cr_assert_eq(fgx_swlink_init(&link, URL, 7), 0);
    cr_assert(link.up);
    cr_assert_geq(link.fd, 0);
    /* connected: nng's pipe callback asked for every file again */
    for (int i = 0; i < 200 && !__atomic_load_n(&link.resend, __ATOMIC_ACQUIRE); i++)
        sleep_ms(10);
    cr_assert_eq(__atomic_load_n(&link.resend, __ATOMIC_ACQUIRE), 1);
    cfg = calloc(1, sizeof(*cfg) + 3 * sizeof(cfg->svc[0]));
    cr_assert_not_null(cfg);
    cfg->nservices = 3;
    cfg->svc[0] = (struct fgx_wsvc){.id = 11, .script = (uint8_t *)"aa", .script_len = 2,
                                    .script_deadline_ms = 100};
    cfg->svc[1] = (struct fgx_wsvc){.id = 12, .script = (uint8_t *)"b\0b", .script_len = 3,
                                    .script_deadline_ms = 50};
    cfg->svc[2] = (struct fgx_wsvc){.id = 13}; /* no script */
}

static void teardown(void)
{
    fgx_swlink_release(&link);
    nng_close(peer);
    free(cfg);
}

TestSuite(swlink, .init = setup, .fini = teardown);

/* The next frame the peer gets: its header, and its payload into buf (at most cap bytes). */
static struct fgx_sw_hdr peer_recv(void *buf, size_t cap, size_t *len)
{
    struct fgx_sw_hdr h;
    nng_msg *m;

    cr_assert_eq(nng_recvmsg(peer, &m, 0), 0, "no frame came");
    cr_assert_geq(nng_msg_len(m), sizeof(h));
    memcpy(&h, nng_msg_body(m), sizeof(h));
    *len = nng_msg_len(m) - sizeof(h);
    cr_assert_eq(*len, h.len);
    cr_assert_leq(*len, cap);
    memcpy(buf, (uint8_t *)nng_msg_body(m) + sizeof(h), *len);
    nng_msg_free(m);
    return h;
}

/* A marker frame from the link: what the peer got before it is all the link sent before. */
static void expect_nothing_more(void)
{
    struct fgx_sw_hdr mark = {.type = FGX_SW_CLOSE, .conn = 0xfeed};
    struct fgx_sw_hdr h;
    char buf[16];
    size_t n;

    cr_assert_eq(fgx_swlink_send(&link, &mark, NULL), 0);
    h = peer_recv(buf, sizeof(buf), &n);
    cr_assert_eq(h.type, FGX_SW_CLOSE, "an unexpected frame of type %u", h.type);
    cr_assert_eq(h.conn, 0xfeed);
}

static void peer_send(const struct fgx_sw_hdr *h, const void *p, size_t len)
{
    nng_msg *m;

    cr_assert_eq(nng_msg_alloc(&m, 0), 0);
    cr_assert_eq(nng_msg_append(m, h, sizeof(*h)), 0);
    if (len)
        cr_assert_eq(nng_msg_append(m, p, len), 0);
    cr_assert_eq(nng_sendmsg(peer, m, 0), 0);
}

Test(swlink, switch_sends_new_and_changed_files_only)
{
    struct fgx_sw_hdr h;
    char buf[64];
    size_t n;

    fgx_swlink_switch(&link, cfg);
    h = peer_recv(buf, sizeof(buf), &n);
    cr_assert_eq(h.type, FGX_SW_SCRIPT);
    cr_assert_eq(h.service, 11);
    cr_assert_eq(h.conn, 100); /* the deadline travels in conn */
    cr_assert_eq(n, 2);
    cr_assert_arr_eq(buf, "aa", 2);
    h = peer_recv(buf, sizeof(buf), &n);
    cr_assert_eq(h.type, FGX_SW_SCRIPT);
    cr_assert_eq(h.service, 12);
    cr_assert_eq(n, 3);
    cr_assert_arr_eq(buf, "b\0b", 3); /* bytes, NUL and all */
    cr_assert_neq(h.seq, 0);
    cr_assert_eq(link.seq, h.seq); /* one counter: DATA frames number after it */
    expect_nothing_more();

    /* the same generation again: nothing */
    fgx_swlink_switch(&link, cfg);
    expect_nothing_more();

    /* a new deadline is a new file there; a service whose script went: UNSCRIPT */
    cfg->svc[1].script_deadline_ms = 75;
    cfg->svc[0].script = NULL;
    fgx_swlink_switch(&link, cfg);
    h = peer_recv(buf, sizeof(buf), &n);
    cr_assert_eq(h.type, FGX_SW_SCRIPT);
    cr_assert_eq(h.service, 12);
    cr_assert_eq(h.conn, 75);
    h = peer_recv(buf, sizeof(buf), &n);
    cr_assert_eq(h.type, FGX_SW_UNSCRIPT);
    cr_assert_eq(h.service, 11);
    cr_assert_eq(n, 0);
    expect_nothing_more();

    /* no generation at all: every file goes */
    fgx_swlink_switch(&link, NULL);
    h = peer_recv(buf, sizeof(buf), &n);
    cr_assert_eq(h.type, FGX_SW_UNSCRIPT);
    cr_assert_eq(h.service, 12);
    expect_nothing_more();
}

Test(swlink, resend_after_connect_sends_every_file_once)
{
    struct fgx_sw_hdr h;
    char buf[64];
    size_t n;

    fgx_swlink_switch(&link, cfg);
    (void)peer_recv(buf, sizeof(buf), &n);
    (void)peer_recv(buf, sizeof(buf), &n);
    /* the connect's flag is still set: a scriptworker that has nothing gets both again */
    fgx_swlink_resend(&link, cfg);
    h = peer_recv(buf, sizeof(buf), &n);
    cr_assert_eq(h.type, FGX_SW_SCRIPT);
    cr_assert_eq(h.service, 11);
    h = peer_recv(buf, sizeof(buf), &n);
    cr_assert_eq(h.type, FGX_SW_SCRIPT);
    cr_assert_eq(h.service, 12);
    expect_nothing_more();
    /* done: the next DATA frame sends nothing ahead of it */
    fgx_swlink_resend(&link, cfg);
    expect_nothing_more();
}

Test(swlink, recv_returns_verdicts_and_queues_logs)
{
    struct fgx_dp_stats st = {0};
    struct fgx_sw_hdr h = {.type = FGX_SW_LOG, .service = 12, .len = 15};
    const uint8_t *pl = NULL;
    size_t len = 0;
    int rv = -EAGAIN;

    cr_assert_eq(fgx_swlink_recv(&link, &h, &pl, &len), -EAGAIN);
    h = (struct fgx_sw_hdr){.type = FGX_SW_LOG, .service = 12, .len = 15};
    peer_send(&h, "print\0fn\0hello!", 15);
    h = (struct fgx_sw_hdr){.type = FGX_SW_ACK, .seq = 3};
    peer_send(&h, NULL, 0); /* an ACK: skipped */
    {
        /* shorter than a header: skipped */
        nng_msg *m;

        cr_assert_eq(nng_msg_alloc(&m, 3), 0);
        cr_assert_eq(nng_sendmsg(peer, m, 0), 0);
    }
    h = (struct fgx_sw_hdr){.type = FGX_SW_VERDICT, .code = FGX_SW_REJECT, .conn = 77,
                            .seq = 9, .len = 9};
    peer_send(&h, "filt\0why!", 9);
    for (int i = 0; i < 200 && rv == -EAGAIN; i++) {
        rv = fgx_swlink_recv(&link, &h, &pl, &len);
        if (rv == -EAGAIN)
            sleep_ms(10);
    }
    cr_assert_eq(rv, 0);
    cr_assert_eq(h.type, FGX_SW_VERDICT);
    cr_assert_eq(h.code, FGX_SW_REJECT);
    cr_assert_eq(h.conn, 77);
    cr_assert_eq(h.seq, 9);
    cr_assert_eq(len, 9);
    cr_assert_arr_eq(pl, "filt\0why!", 9);
    {
        char fn[4];

        fgx_swlink_verdict_fn(pl, len, fn, sizeof(fn));
        cr_assert_str_eq(fn, "fil"); /* cut to its buffer */
        fgx_swlink_verdict_fn((const uint8_t *)"ab", 2, fn, sizeof(fn));
        cr_assert_str_eq(fn, "ab"); /* no NUL in the payload */
    }
    cr_assert_eq(fgx_swlink_recv(&link, &h, NULL, NULL), -EAGAIN);

    cr_assert_eq(fgx_swlink_logs_take(&st), 0);
    cr_assert_eq(st.nscript_logs, 1);
    cr_assert_eq(st.script_logs[0].service_id, 12);
    cr_assert_str_eq(st.script_logs[0].kind, "print");
    cr_assert_str_eq(st.script_logs[0].function, "fn");
    cr_assert_str_eq(st.script_logs[0].text, "hello!");
    free(st.script_logs[0].kind);
    free(st.script_logs[0].function);
    free(st.script_logs[0].text);
    free(st.script_logs);
}

Test(swlink, log_queue_is_bounded_and_counts_losses)
{
    struct fgx_dp_stats st = {0};
    uint64_t lost0;

    cr_assert_eq(fgx_swlink_logs_take(&st), 0);
    lost0 = st.script_logs_lost;
    fgx_swlink_log_push(1, "print\0fn", 8); /* no second separator: ignored */
    for (int i = 0; i < FGX_SWLINK_LOG_MAX + 3; i++)
        fgx_swlink_log_push(1, "print\0f\0x", 9);
    st = (struct fgx_dp_stats){0};
    cr_assert_eq(fgx_swlink_logs_take(&st), 0);
    cr_assert_eq(st.nscript_logs, FGX_SWLINK_LOG_MAX);
    cr_assert_eq(st.script_logs_lost, lost0 + 3);
    cr_assert_str_eq(st.script_logs[0].text, "x");
    for (size_t i = 0; i < st.nscript_logs; i++) {
        free(st.script_logs[i].kind);
        free(st.script_logs[i].function);
        free(st.script_logs[i].text);
    }
    free(st.script_logs);
    /* taken: the next take has none */
    st = (struct fgx_dp_stats){0};
    cr_assert_eq(fgx_swlink_logs_take(&st), 0);
    cr_assert_eq(st.nscript_logs, 0);
}

Test(swlink, without_url_is_down)
{
    struct fgx_swlink down;
    struct fgx_sw_hdr h = {.type = FGX_SW_CLOSE};

    cr_assert_eq(fgx_swlink_init(&down, NULL, 0), 0);
    cr_assert_not(down.up);
    cr_assert_eq(down.fd, -1);
    cr_assert_eq(fgx_swlink_send(&down, &h, NULL), -ENOTCONN);
    cr_assert_eq(fgx_swlink_recv(&down, &h, NULL, NULL), -EAGAIN);
    fgx_swlink_switch(&down, cfg);
    cr_assert_eq(down.nsent, 0);
    fgx_swlink_release(&down);
    cr_assert_eq(fgx_swlink_init(&down, "", 0), 0);
    cr_assert_not(down.up);
    fgx_swlink_release(&down);
}
