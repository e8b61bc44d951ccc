/* Unit tests for the data-path threads' link to scriptworker (libcommon/swlink.c) over its real
 * transport (fgx/swproto.h): in a directory of its own, the test listens on SOCK_SEQPACKET
 * sockets PATH.0, PATH.1 (two fake interpreters) and PATH (the fake parent), in that order as
 * scriptworker does, accepts the link's connections and plays each side. What goes where (HELLO,
 * DATA by hash, SCRIPT / UNSCRIPT to all, CLOSE ahead of the next DATA), which files go as the
 * ruleset changes and after a (re)connect, how verdicts are matched to calls, what a gone
 * interpreter or parent leaves behind (ERROR for its calls, the parent's TIMEOUT first and
 * once), the calls ring's bound, the log queue's. */
#include <criterion/criterion.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fgx/swlink.h"

#define LINK_ID 0x1122334455667788ull
#define WAIT_MS 2000 /* the longest the test waits for a frame that must come */
#define RETRY_MS 110 /* past the link's 100 ms between connection attempts */
#define MAXF 64

static const char replaced[] = "\0interpreter replaced";

static char dir[64], path[96];
static unsigned npy;                    /* fake interpreters listening */
static int lst[FGX_SW_PROCS_MAX], lctl; /* the listeners PATH.i, PATH */
static int py[FGX_SW_PROCS_MAX], ctl;   /* the link's connections, accepted */
static struct fgx_swlink lk;
static struct fgx_wcfg *cfg;
static uint8_t mbuf[FGX_SW_REPLY_MAX]; /* the last message a fake peer got */

struct frame {
    struct fgx_sw_hdr h;
    const uint8_t *p;
};

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static int listen_at(const char *p)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

    cr_assert_geq(fd, 0);
    cr_assert_lt(strlen(p), sizeof(a.sun_path));
    strcpy(a.sun_path, p);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0, "bind %s: %s", p, strerror(errno));
    cr_assert_eq(listen(fd, 8), 0);
    return fd;
}

/* scriptworker's order: every interpreter's socket, then the parent's */
static void listen_all(unsigned n)
{
    char p[sizeof(path) + 16];

    for (unsigned i = 0; i < n; i++) {
        (void)snprintf(p, sizeof(p), "%s.%u", path, i);
        lst[i] = listen_at(p);
    }
    lctl = listen_at(path);
    npy = n;
}

static void unlisten_all(void)
{
    char p[sizeof(path) + 16];

    for (unsigned i = 0; i < npy; i++) {
        if (lst[i] >= 0)
            close(lst[i]);
        lst[i] = -1;
        (void)snprintf(p, sizeof(p), "%s.%u", path, i);
        (void)unlink(p);
    }
    if (lctl >= 0)
        close(lctl);
    lctl = -1;
    (void)unlink(path);
}

/* Whether a connection waits on listener fd (within ms). */
static bool pending(int fd, int ms)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};

    return poll(&pf, 1, ms) == 1;
}

static int accept_one(int l)
{
    struct timeval tv = {.tv_sec = WAIT_MS / 1000};
    int fd;

    cr_assert(pending(l, WAIT_MS), "the link did not connect");
    fd = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    return fd;
}

static void accept_all(void)
{
    ctl = accept_one(lctl);
    for (unsigned i = 0; i < npy; i++)
        py[i] = accept_one(lst[i]);
}

/* The next message on fd (waiting at most WAIT_MS), into mbuf: its frames into f, which must
 * fill it exactly. Returns how many. */
static size_t peer_recv(int fd, struct frame *f, size_t max)
{
    ssize_t n = recv(fd, mbuf, sizeof(mbuf), 0);
    size_t off = 0, k = 0;

    cr_assert_gt(n, 0, "no message came (%s)", n == -1 ? strerror(errno) : "end");
    while (off < (size_t)n) {
        cr_assert_lt(k, max);
        cr_assert_geq((size_t)n - off, sizeof(f[k].h), "a piece of a header");
        memcpy(&f[k].h, mbuf + off, sizeof(f[k].h));
        off += sizeof(f[k].h);
        cr_assert_leq(f[k].h.len, (size_t)n - off, "a frame cut short");
        f[k].p = mbuf + off;
        off += f[k].h.len;
        k++;
    }
    return k;
}

/* The next message on fd, which must be one frame. */
static struct frame peer_recv1(int fd)
{
    struct frame f[MAXF];

    cr_assert_eq(peer_recv(fd, f, MAXF), 1, "more than one frame in the message");
    return f[0];
}

/* Nothing waits on fd: the link's sends are synchronous, so what it sent is there already. */
static void peer_none(int fd)
{
    ssize_t n = recv(fd, mbuf, sizeof(mbuf), MSG_DONTWAIT);

    cr_assert(n == -1 && errno == EAGAIN, "an unexpected message (%zd bytes, type %u)", n,
              n > 0 ? mbuf[0] : 0);
}

static void peer_none_all(void)
{
    peer_none(ctl);
    for (unsigned i = 0; i < npy; i++)
        peer_none(py[i]);
}

/* Every message waiting on fd, read; how many. */
static unsigned peer_drain(int fd)
{
    unsigned n = 0;

    while (recv(fd, mbuf, sizeof(mbuf), MSG_DONTWAIT) > 0)
        n++;
    return n;
}

static void peer_send_raw(int fd, const void *m, size_t len)
{
    cr_assert_eq(send(fd, m, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* One message of the frames h[0..n-1], payloads p[k] (h[k].len bytes each). */
static void peer_sendv(int fd, const struct fgx_sw_hdr *h, const void *const *p, size_t n)
{
    static uint8_t m[FGX_SW_REPLY_MAX];
    size_t off = 0;

    for (size_t k = 0; k < n; k++) {
        cr_assert_leq(off + sizeof(h[k]) + h[k].len, sizeof(m));
        memcpy(m + off, &h[k], sizeof(h[k]));
        off += sizeof(h[k]);
        if (h[k].len > 0)
            memcpy(m + off, p[k], h[k].len);
        off += h[k].len;
    }
    peer_send_raw(fd, m, off);
}

static void peer_send(int fd, const struct fgx_sw_hdr *h, const void *p)
{
    peer_sendv(fd, h, &p, 1);
}

static void expect_hello(int fd)
{
    struct frame f = peer_recv1(fd);

    cr_assert_eq(f.h.type, FGX_SW_HELLO, "the first frame is of type %u", f.h.type);
    cr_assert_eq(f.h.conn, LINK_ID);
    cr_assert_eq(f.h.len, 0);
}

/* The files of cfg, each in a message of its own, in cfg's order. */
static void expect_files(int fd)
{
    struct frame f = peer_recv1(fd);

    cr_assert_eq(f.h.type, FGX_SW_SCRIPT);
    cr_assert_eq(f.h.service, 11);
    cr_assert_eq(f.h.conn, 100); /* the deadline travels in conn */
    cr_assert_eq(f.h.len, 2);
    cr_assert_arr_eq(f.p, "aa", 2);
    cr_assert_neq(f.h.seq, 0);
    f = peer_recv1(fd);
    cr_assert_eq(f.h.type, FGX_SW_SCRIPT);
    cr_assert_eq(f.h.service, 12);
    cr_assert_eq(f.h.conn, 50);
    cr_assert_eq(f.h.len, 3);
    cr_assert_arr_eq(f.p, "b\0b", 3); /* bytes, NUL and all */
}

/* scriptworker with n interpreters listening, the link connected to it, every connection
 * accepted (their HELLO not read yet) */
static void start(unsigned n)
{
    char tmpl[] = "/tmp/fgx-swlink-XXXXXX";
    char url[sizeof(path) + 16];

    for (unsigned i = 0; i < FGX_SW_PROCS_MAX; i++)
        lst[i] = py[i] = -1;
    lctl = ctl = -1;
    cr_assert_not_null(mkdtemp(tmpl));
    (void)snprintf(dir, sizeof(dir), "%s", tmpl);
    (void)snprintf(path, sizeof(path), "%s/sw", dir);
    listen_all(n);
    (void)snprintf(url, sizeof(url), "ipc://%s", path);
    cr_assert_eq(fgx_swlink_init(&lk, url, LINK_ID), 0);
    cr_assert(lk.up);
    cr_assert_geq(lk.fd, 0);
    accept_all();
}

/* the HELLOs read, the first generation's files sent and read */
static void ready(void)
{
    expect_hello(ctl);
    for (unsigned i = 0; i < npy; i++)
        expect_hello(py[i]);
    fgx_swlink_switch(&lk, cfg);
    for (unsigned i = 0; i < npy; i++)
        expect_files(py[i]);
    peer_none_all();
}

static void start_ready(unsigned n)
{
    start(n);
    ready();
}

static void make_cfg(void)
{
    cfg = calloc(1, sizeof(*cfg) + 3 * sizeof(cfg->svc[0]));
    cr_assert_not_null(cfg);
    cfg->nservices = 3;
    cfg->svc[0] = (struct fgx_wsvc){
        .id = 11, .script = (uint8_t *)"aa", .script_len = 2, .script_deadline_ms = 100};
    cfg->svc[1] = (struct fgx_wsvc){
        .id = 12, .script = (uint8_t *)"b\0b", .script_len = 3, .script_deadline_ms = 50};
    cfg->svc[2] = (struct fgx_wsvc){.id = 13}; /* no script */
}

static void setup(void)
{
    make_cfg();
    start(2);
}

static void setup_cfg_only(void)
{
    make_cfg();
    for (unsigned i = 0; i < FGX_SW_PROCS_MAX; i++)
        lst[i] = py[i] = -1;
    lctl = ctl = -1;
}

static void teardown(void)
{
    fgx_swlink_release(&lk);
    for (unsigned i = 0; i < FGX_SW_PROCS_MAX; i++)
        if (py[i] >= 0)
            close(py[i]);
    if (ctl >= 0)
        close(ctl);
    if (dir[0] != '\0') {
        unlisten_all();
        (void)rmdir(dir);
    }
    free(cfg);
}

TestSuite(swlink, .init = setup, .fini = teardown);
TestSuite(swlink_procs, .init = setup_cfg_only, .fini = teardown);

/* A DATA frame of the link: conn, hash, payload "x" */
static struct fgx_sw_hdr data_hdr(uint64_t conn, uint16_t hash)
{
    return (struct fgx_sw_hdr){
        .type = FGX_SW_DATA, .hash = hash, .service = 12, .conn = conn, .seq = ++lk.seq, .len = 1};
}

static struct fgx_sw_hdr send_data(uint64_t conn, uint16_t hash)
{
    struct fgx_sw_hdr h = data_hdr(conn, hash);

    cr_assert_eq(fgx_swlink_send(&lk, &h, "x"), 0);
    return h;
}

/* The DATA frame h reached interpreter fd, alone in its message. */
static void expect_data(int fd, const struct fgx_sw_hdr *h)
{
    struct frame f = peer_recv1(fd);

    cr_assert_eq(f.h.type, FGX_SW_DATA, "a frame of type %u", f.h.type);
    cr_assert_eq(f.h.conn, h->conn);
    cr_assert_eq(f.h.seq, h->seq);
    cr_assert_eq(f.h.len, 1);
    cr_assert_eq(f.p[0], 'x');
}

static struct fgx_sw_hdr verdict_hdr(const struct fgx_sw_hdr *call, uint8_t code, uint32_t len)
{
    return (struct fgx_sw_hdr){.type = FGX_SW_VERDICT,
                               .code = code,
                               .service = call->service,
                               .conn = call->conn,
                               .seq = call->seq,
                               .len = len};
}

/* The next verdict recv returns must be there already. */
static struct fgx_sw_hdr recv_ok(const uint8_t **pl, size_t *len)
{
    struct fgx_sw_hdr h;

    cr_assert_eq(fgx_swlink_recv(&lk, &h, pl, len), 0, "no verdict");
    cr_assert_eq(h.type, FGX_SW_VERDICT);
    return h;
}

/* The next verdict is the ERROR made for call c of a gone interpreter. */
static void expect_replaced(const struct fgx_sw_hdr *c)
{
    const uint8_t *pl;
    size_t len;
    struct fgx_sw_hdr h = recv_ok(&pl, &len);

    cr_assert_eq(h.code, FGX_SW_ERROR, "code %u", h.code);
    cr_assert_eq(h.conn, c->conn, "conn %llu, not %llu", (unsigned long long)h.conn,
                 (unsigned long long)c->conn);
    cr_assert_eq(h.seq, c->seq);
    cr_assert_eq(h.service, c->service);
    cr_assert_eq(len, sizeof(replaced) - 1);
    cr_assert_eq(h.len, len);
    cr_assert_arr_eq(pl, replaced, len);
}

static void free_logs(struct fgx_dp_stats *st)
{
    for (size_t i = 0; i < st->nscript_logs; i++) {
        free(st->script_logs[i].kind);
        free(st->script_logs[i].function);
        free(st->script_logs[i].text);
    }
    free(st->script_logs);
    *st = (struct fgx_dp_stats){0};
}

/* The log queue holds exactly one entry, this one; it is taken. */
static void expect_one_log(uint32_t service, const char *kind, const char *fn, const char *text)
{
    struct fgx_dp_stats st = {0};

    cr_assert_eq(fgx_swlink_logs_take(&st), 0);
    cr_assert_eq(st.nscript_logs, 1);
    cr_assert_eq(st.script_logs[0].service_id, service);
    cr_assert_str_eq(st.script_logs[0].kind, kind);
    cr_assert_str_eq(st.script_logs[0].function, fn);
    cr_assert_str_eq(st.script_logs[0].text, text);
    free_logs(&st);
}

Test(swlink, hello_is_first_on_every_socket_and_files_come_before_data)
{
    struct fgx_sw_hdr h = data_hdr(1, 0);

    cr_assert_eq(lk.nprocs, 2);
    expect_hello(ctl);
    expect_hello(py[0]);
    expect_hello(py[1]);
    /* connected, but the interpreters have no file yet: no DATA before them */
    cr_assert_eq(fgx_swlink_send(&lk, &h, "x"), -ENOTCONN);
    peer_none_all();
    fgx_swlink_resend(&lk, cfg);
    expect_files(py[0]);
    expect_files(py[1]);
    h = send_data(1, 0);
    expect_data(py[0], &h);
    peer_none_all(); /* the parent is sent nothing but the HELLO */
}

Test(swlink, data_by_hash_scripts_to_every_interpreter)
{
    struct fgx_sw_hdr h;
    struct frame f;

    expect_hello(ctl);
    expect_hello(py[0]);
    expect_hello(py[1]);
    fgx_swlink_switch(&lk, cfg);
    expect_files(py[0]);
    expect_files(py[1]);
    for (uint16_t hash = 0; hash < 6; hash++) {
        h = send_data(100 + hash, hash);
        expect_data(py[hash % 2], &h);
        peer_none_all();
    }
    h = send_data(7, 0xffff);
    expect_data(py[1], &h);
    /* a changed file and a removed one: both interpreters, the same frames */
    cfg->svc[0].script = (uint8_t *)"new";
    cfg->svc[0].script_len = 3;
    cfg->svc[1].script = NULL;
    fgx_swlink_switch(&lk, cfg);
    for (unsigned i = 0; i < 2; i++) {
        f = peer_recv1(py[i]);
        cr_assert_eq(f.h.type, FGX_SW_SCRIPT);
        cr_assert_eq(f.h.service, 11);
        cr_assert_eq(f.h.len, 3);
        cr_assert_arr_eq(f.p, "new", 3);
        f = peer_recv1(py[i]);
        cr_assert_eq(f.h.type, FGX_SW_UNSCRIPT);
        cr_assert_eq(f.h.service, 12);
        cr_assert_eq(f.h.len, 0);
    }
    peer_none_all();
}

Test(swlink_procs, interpreters_counted_from_the_sockets_that_exist)
{
    struct fgx_sw_hdr h;

    start_ready(3);
    cr_assert_eq(lk.nprocs, 3);
    for (uint16_t hash = 0; hash < 7; hash++) {
        h = send_data(hash, hash);
        expect_data(py[hash % 3], &h);
        peer_none_all();
    }
}

Test(swlink_procs, one_interpreter_judges_every_connection)
{
    struct fgx_sw_hdr h;

    start_ready(1);
    cr_assert_eq(lk.nprocs, 1);
    for (uint16_t hash = 0; hash < 4; hash++) {
        h = send_data(hash, hash * 7);
        expect_data(py[0], &h);
    }
    peer_none_all();
}

Test(swlink, close_goes_ahead_of_the_next_data)
{
    struct fgx_sw_hdr c1 = {.type = FGX_SW_CLOSE, .hash = 3, .service = 12, .conn = 41};
    struct fgx_sw_hdr c2 = {.type = FGX_SW_CLOSE, .hash = 5, .service = 12, .conn = 42};
    struct fgx_sw_hdr c0 = {.type = FGX_SW_CLOSE, .hash = 2, .service = 12, .conn = 40};
    struct fgx_sw_hdr h;
    struct frame f[MAXF];

    expect_hello(ctl);
    expect_hello(py[0]);
    expect_hello(py[1]);
    fgx_swlink_switch(&lk, cfg);
    expect_files(py[0]);
    expect_files(py[1]);
    cr_assert_eq(fgx_swlink_send(&lk, &c1, NULL), 0);
    cr_assert_eq(fgx_swlink_send(&lk, &c2, NULL), 0);
    cr_assert_eq(fgx_swlink_send(&lk, &c0, NULL), 0);
    peer_none_all(); /* none alone */
    h = send_data(43, 1);
    cr_assert_eq(peer_recv(py[1], f, MAXF), 3);
    cr_assert_eq(f[0].h.type, FGX_SW_CLOSE);
    cr_assert_eq(f[0].h.conn, 41);
    cr_assert_eq(f[1].h.type, FGX_SW_CLOSE);
    cr_assert_eq(f[1].h.conn, 42);
    cr_assert_eq(f[2].h.type, FGX_SW_DATA);
    cr_assert_eq(f[2].h.conn, 43);
    cr_assert_eq(f[2].h.seq, h.seq);
    cr_assert_eq(f[2].h.len, 1);
    cr_assert_eq(f[2].p[0], 'x');
    /* interpreter 0's CLOSE still waits for its own next message */
    peer_none_all();
    h = send_data(44, 0);
    cr_assert_eq(peer_recv(py[0], f, MAXF), 2);
    cr_assert_eq(f[0].h.type, FGX_SW_CLOSE);
    cr_assert_eq(f[0].h.conn, 40);
    cr_assert_eq(f[1].h.type, FGX_SW_DATA);
    cr_assert_eq(f[1].h.conn, 44);
    /* sent: nothing goes twice */
    h = send_data(45, 0);
    expect_data(py[0], &h);
    peer_none_all();
}

Test(swlink, switch_sends_new_and_changed_files_only)
{
    struct frame f;

    expect_hello(ctl);
    expect_hello(py[0]);
    expect_hello(py[1]);
    fgx_swlink_switch(&lk, cfg);
    expect_files(py[0]);
    expect_files(py[1]);
    peer_none_all();
    /* the same generation again: nothing */
    fgx_swlink_switch(&lk, cfg);
    peer_none_all();
    /* a new deadline is a new file there; a service whose script went: UNSCRIPT */
    cfg->svc[1].script_deadline_ms = 75;
    cfg->svc[0].script = NULL;
    fgx_swlink_switch(&lk, cfg);
    for (unsigned i = 0; i < 2; i++) {
        f = peer_recv1(py[i]);
        cr_assert_eq(f.h.type, FGX_SW_SCRIPT);
        cr_assert_eq(f.h.service, 12);
        cr_assert_eq(f.h.conn, 75);
        cr_assert_eq(f.h.seq, lk.seq); /* one counter: DATA frames number after it */
        f = peer_recv1(py[i]);
        cr_assert_eq(f.h.type, FGX_SW_UNSCRIPT);
        cr_assert_eq(f.h.service, 11);
        cr_assert_eq(f.h.len, 0);
    }
    peer_none_all();
    /* no generation at all: every file goes */
    fgx_swlink_switch(&lk, NULL);
    for (unsigned i = 0; i < 2; i++) {
        f = peer_recv1(py[i]);
        cr_assert_eq(f.h.type, FGX_SW_UNSCRIPT);
        cr_assert_eq(f.h.service, 12);
    }
    peer_none_all();
    cr_assert_eq(lk.nsent, 0);
}

Test(swlink, every_file_once_after_a_connect)
{
    expect_hello(ctl);
    expect_hello(py[0]);
    expect_hello(py[1]);
    fgx_swlink_resend(&lk, cfg);
    expect_files(py[0]);
    expect_files(py[1]);
    peer_none_all();
    /* done: the next DATA frames send nothing ahead of them */
    fgx_swlink_resend(&lk, cfg);
    peer_none_all();
    cr_assert_not(lk.need);
}

Test(swlink, recv_returns_verdicts_and_queues_logs)
{
    static const uint8_t shortmsg[3] = {FGX_SW_VERDICT, 0, 0};
    struct fgx_sw_hdr h, call;
    const uint8_t *pl = NULL;
    size_t len = 0;
    char fn[4];

    ready();
    cr_assert_eq(fgx_swlink_recv(&lk, &h, &pl, &len), -EAGAIN);
    call = send_data(77, 0);
    h = (struct fgx_sw_hdr){.type = FGX_SW_LOG, .service = 12, .len = 15};
    peer_send(py[0], &h, "print\0fn\0hello!");
    h = (struct fgx_sw_hdr){.type = FGX_SW_ACK, .seq = 3};
    peer_send(py[0], &h, NULL); /* an ACK: skipped */
    h = (struct fgx_sw_hdr){.type = FGX_SW_HELLO, .conn = 5};
    peer_send(py[0], &h, NULL);                       /* skipped */
    peer_send_raw(py[0], shortmsg, sizeof(shortmsg)); /* shorter than a header: skipped */
    h = verdict_hdr(&call, FGX_SW_REJECT, 9);
    peer_send(py[0], &h, "filt\0why!");
    h = recv_ok(&pl, &len);
    cr_assert_eq(h.code, FGX_SW_REJECT);
    cr_assert_eq(h.conn, 77);
    cr_assert_eq(h.seq, call.seq);
    cr_assert_eq(h.service, 12);
    cr_assert_eq(len, 9);
    cr_assert_arr_eq(pl, "filt\0why!", 9);
    fgx_swlink_verdict_fn(pl, len, fn, sizeof(fn));
    cr_assert_str_eq(fn, "fil"); /* cut to its buffer */
    fgx_swlink_verdict_fn((const uint8_t *)"ab", 2, fn, sizeof(fn));
    cr_assert_str_eq(fn, "ab"); /* no NUL in the payload */
    cr_assert_eq(fgx_swlink_recv(&lk, &h, NULL, NULL), -EAGAIN);

    expect_one_log(12, "print", "fn", "hello!");
}

Test(swlink, verdicts_are_matched_to_their_calls)
{
    struct fgx_sw_hdr a, b, c, unknown, v[5];
    const void *p[5] = {"f\0", "print\0f\0in one message", "f\0", "f\0", "f\0"};
    struct fgx_dp_stats st = {0};
    bool got_c = false;
    uint64_t order[3];
    unsigned n = 0;

    ready();
    a = send_data(1, 0);
    b = send_data(2, 2);
    c = send_data(3, 1);
    expect_data(py[0], &a);
    expect_data(py[0], &b);
    expect_data(py[1], &c);
    /* a's verdict from the interpreter that does not judge it: skipped */
    v[0] = verdict_hdr(&a, FGX_SW_REJECT, 2);
    peer_sendv(py[1], v, p, 1);
    cr_assert_eq(fgx_swlink_recv(&lk, &v[0], NULL, NULL), -EAGAIN);
    /* interpreter 0, all in one message: a verdict for a call it never had, a log entry, a's
     * verdict, a's again (answered already), b's */
    unknown = (struct fgx_sw_hdr){.conn = 99, .seq = 12345, .service = 12};
    v[0] = verdict_hdr(&unknown, FGX_SW_REJECT, 2);
    v[1] = (struct fgx_sw_hdr){.type = FGX_SW_LOG, .service = 12, .len = 22};
    v[2] = verdict_hdr(&a, FGX_SW_ACCEPT, 2);
    v[3] = verdict_hdr(&a, FGX_SW_REJECT, 2);
    v[4] = verdict_hdr(&b, FGX_SW_DROP, 2);
    peer_sendv(py[0], v, p, 5);
    /* interpreter 1: c's, twice */
    v[0] = verdict_hdr(&c, FGX_SW_REJECT, 2);
    peer_sendv(py[1], v, p, 1);
    peer_sendv(py[1], v, p, 1);
    for (struct fgx_sw_hdr h; fgx_swlink_recv(&lk, &h, NULL, NULL) == 0;) {
        cr_assert_lt(n, 3, "a verdict too many: conn %llu code %u", (unsigned long long)h.conn,
                     h.code);
        cr_assert_eq(h.type, FGX_SW_VERDICT);
        if (h.conn == 1)
            cr_assert_eq(h.code, FGX_SW_ACCEPT);
        else if (h.conn == 2)
            cr_assert_eq(h.code, FGX_SW_DROP);
        else
            cr_assert_eq(h.conn, 3);
        got_c |= h.conn == 3;
        order[n++] = h.conn;
    }
    cr_assert_eq(n, 3, "%u verdicts of 3", n);
    cr_assert(got_c);
    /* one interpreter's come in order */
    for (unsigned k = 0, seen_a = 0; k < n; k++) {
        if (order[k] == 1)
            seen_a = 1;
        if (order[k] == 2)
            cr_assert(seen_a, "b before a");
    }
    cr_assert_eq(fgx_swlink_logs_take(&st), 0);
    cr_assert_eq(st.nscript_logs, 1);
    cr_assert_str_eq(st.script_logs[0].text, "in one message");
    free_logs(&st);
}

Test(swlink, a_message_cut_short_is_skipped)
{
    struct fgx_sw_hdr a, b, v[2];
    const void *p[2] = {"f\0", "0123456789"};
    uint8_t m[sizeof(struct fgx_sw_hdr) + 10];
    struct fgx_sw_hdr h;

    ready();
    a = send_data(1, 0);
    b = send_data(2, 0);
    /* a's verdict whose header says 100 bytes follow, and 10 do */
    h = verdict_hdr(&a, FGX_SW_REJECT, 100);
    memcpy(m, &h, sizeof(h));
    memcpy(m + sizeof(h), "0123456789", 10);
    peer_send_raw(py[0], m, sizeof(m));
    cr_assert_eq(fgx_swlink_recv(&lk, &h, NULL, NULL), -EAGAIN);
    /* a whole verdict, then a frame cut short in the same message */
    v[0] = verdict_hdr(&a, FGX_SW_ACCEPT, 2);
    v[1] = verdict_hdr(&b, FGX_SW_REJECT, 10);
    {
        uint8_t m2[2 * sizeof(h) + 2 + 4];

        memcpy(m2, &v[0], sizeof(h));
        memcpy(m2 + sizeof(h), p[0], 2);
        memcpy(m2 + sizeof(h) + 2, &v[1], sizeof(h));
        memcpy(m2 + 2 * sizeof(h) + 2, "0123", 4);
        peer_send_raw(py[0], m2, sizeof(m2));
    }
    h = recv_ok(NULL, NULL);
    cr_assert_eq(h.conn, 1);
    cr_assert_eq(h.code, FGX_SW_ACCEPT);
    cr_assert_eq(fgx_swlink_recv(&lk, &h, NULL, NULL), -EAGAIN);
    /* the link reads on: b's whole verdict */
    v[1].len = 10;
    peer_sendv(py[0], &v[1], &p[1], 1);
    h = recv_ok(NULL, NULL);
    cr_assert_eq(h.conn, 2);
    cr_assert_eq(h.code, FGX_SW_REJECT);
    cr_assert_eq(fgx_swlink_recv(&lk, &h, NULL, NULL), -EAGAIN);
}

Test(swlink, a_gone_interpreter_leaves_an_error_for_each_of_its_calls)
{
    struct fgx_sw_hdr a, b, c, d, h;

    ready();
    a = send_data(1, 0);
    b = send_data(2, 2);
    c = send_data(3, 4);
    d = send_data(4, 1);
    close(py[0]);
    py[0] = -1;
    expect_replaced(&a);
    expect_replaced(&b);
    expect_replaced(&c);
    cr_assert_eq(fgx_swlink_recv(&lk, &h, NULL, NULL), -EAGAIN); /* d waits on */
    h = data_hdr(5, 0);
    cr_assert_eq(fgx_swlink_send(&lk, &h, "x"), -ENOTCONN);
    /* interpreter 1 answers on */
    h = verdict_hdr(&d, FGX_SW_ACCEPT, 0);
    peer_send(py[1], &h, NULL);
    h = recv_ok(NULL, NULL);
    cr_assert_eq(h.conn, 4);
    cr_assert_eq(h.code, FGX_SW_ACCEPT);
    cr_assert_eq(fgx_swlink_recv(&lk, &h, NULL, NULL), -EAGAIN);
}

Test(swlink, the_parents_timeout_comes_first_and_only_once)
{
    struct fgx_sw_hdr a, b, c, h, v[2];
    const void *p[2] = {"timeout\0slow\0past its deadline", "slow\0past the deadline"};
    const uint8_t *pl;
    size_t len;

    ready();
    a = send_data(1, 0);
    b = send_data(2, 0);
    c = send_data(3, 0);
    /* as scriptworker replaces an interpreter stuck in b: the log entry and the TIMEOUT on
     * the parent's socket, then the interpreter's socket ends */
    v[0] = (struct fgx_sw_hdr){.type = FGX_SW_LOG, .service = 12, .len = 30};
    v[1] = verdict_hdr(&b, FGX_SW_TIMEOUT, 22);
    peer_sendv(ctl, v, p, 2);
    close(py[0]);
    py[0] = -1;
    h = recv_ok(&pl, &len);
    cr_assert_eq(h.code, FGX_SW_TIMEOUT, "code %u for conn %llu", h.code,
                 (unsigned long long)h.conn);
    cr_assert_eq(h.conn, 2);
    cr_assert_eq(h.seq, b.seq);
    cr_assert_eq(len, 22);
    cr_assert_arr_eq(pl, "slow\0past the deadline", 22);
    expect_replaced(&a);
    expect_replaced(&c);
    cr_assert_eq(fgx_swlink_recv(&lk, &h, NULL, NULL), -EAGAIN);
    expect_one_log(12, "timeout", "slow", "past its deadline");
}

/* The interpreter answered just as the parent gave up on it: one verdict all the same. */
Test(swlink, a_late_answer_after_the_timeout_is_not_a_second_verdict)
{
    struct fgx_sw_hdr a, b, h;
    unsigned na = 0, nb = 0;

    ready();
    a = send_data(1, 0);
    b = send_data(2, 0);
    h = verdict_hdr(&a, FGX_SW_TIMEOUT, 0);
    peer_send(ctl, &h, NULL);
    h = verdict_hdr(&a, FGX_SW_ACCEPT, 0);
    peer_send(py[0], &h, NULL);
    /* and a TIMEOUT for a call the link does not have: skipped */
    h = (struct fgx_sw_hdr){.type = FGX_SW_VERDICT, .code = FGX_SW_TIMEOUT, .conn = 77, .seq = 1};
    peer_send(ctl, &h, NULL);
    close(py[0]);
    py[0] = -1;
    while (fgx_swlink_recv(&lk, &h, NULL, NULL) == 0) {
        cr_assert(h.conn == 1 || h.conn == 2, "a verdict for conn %llu",
                  (unsigned long long)h.conn);
        if (h.conn == 1) {
            na++;
            cr_assert(h.code == FGX_SW_TIMEOUT || h.code == FGX_SW_ACCEPT);
        } else {
            nb++;
            cr_assert_eq(h.code, FGX_SW_ERROR);
            cr_assert_eq(h.seq, b.seq);
        }
    }
    cr_assert_eq(na, 1);
    cr_assert_eq(nb, 1);
}

Test(swlink, a_replaced_interpreter_is_reconnected_and_sent_every_file)
{
    struct fgx_sw_hdr a, b, d, h;
    uint64_t t;

    ready();
    a = send_data(1, 0);
    b = send_data(2, 0);
    close(py[0]);
    py[0] = -1;
    expect_replaced(&a);
    sleep_ms(RETRY_MS);
    /* b's ERROR not taken yet: a new connection would lose it */
    fgx_swlink_resend(&lk, cfg);
    cr_assert_not(pending(lst[0], 0));
    cr_assert(lk.need);
    h = data_hdr(3, 0);
    cr_assert_eq(fgx_swlink_send(&lk, &h, "x"), -ENOTCONN);
    expect_replaced(&b);
    cr_assert_eq(fgx_swlink_recv(&lk, &h, NULL, NULL), -EAGAIN);
    fgx_swlink_resend(&lk, cfg);
    py[0] = accept_one(lst[0]);
    expect_hello(py[0]);
    expect_files(py[0]);
    peer_none_all(); /* interpreter 1 had them already */
    d = send_data(3, 0);
    expect_data(py[0], &d);
    cr_assert_not(lk.need);

    /* replaced again at once: not tried again within 100 ms of the last attempt */
    t = lk.retry_ms;
    a = send_data(4, 0);
    expect_data(py[0], &a);
    close(py[0]);
    py[0] = -1;
    expect_replaced(&d);
    expect_replaced(&a);
    cr_assert_eq(fgx_swlink_recv(&lk, &h, NULL, NULL), -EAGAIN);
    fgx_swlink_resend(&lk, cfg);
    if (lk.retry_ms == t) /* resend ran within the 100 ms (not on a machine that slow) */
        cr_assert_not(pending(lst[0], 0), "connected again within 100 ms");
    sleep_ms(RETRY_MS);
    fgx_swlink_resend(&lk, cfg);
    py[0] = accept_one(lst[0]);
    expect_hello(py[0]);
    expect_files(py[0]);
    h = send_data(5, 0);
    expect_data(py[0], &h);
    peer_none_all();
}

Test(swlink, scriptworker_gone_every_call_errs_until_it_is_back)
{
    struct fgx_sw_hdr a, b, c, h;
    unsigned seen = 0;

    ready();
    a = send_data(1, 0);
    b = send_data(2, 1);
    c = send_data(3, 2);
    expect_data(py[0], &a);
    expect_data(py[1], &b);
    expect_data(py[0], &c);
    /* the parent goes, its listeners with it */
    close(ctl);
    ctl = -1;
    unlisten_all();
    for (unsigned k = 0; k < 3; k++) {
        const uint8_t *pl;
        size_t len;

        h = recv_ok(&pl, &len);
        cr_assert_eq(h.code, FGX_SW_ERROR);
        cr_assert_eq(len, sizeof(replaced) - 1);
        cr_assert_arr_eq(pl, replaced, len);
        cr_assert(h.conn >= 1 && h.conn <= 3);
        cr_assert_eq(h.seq, h.conn == 1 ? a.seq : h.conn == 2 ? b.seq : c.seq);
        seen |= 1u << h.conn;
    }
    cr_assert_eq(seen, 0xe, "not one ERROR for each call");
    cr_assert_eq(fgx_swlink_recv(&lk, &h, NULL, NULL), -EAGAIN);
    /* the link let go of the interpreters too */
    for (unsigned i = 0; i < 2; i++) {
        cr_assert_eq(recv(py[i], mbuf, sizeof(mbuf), 0), 0, "interpreter %u still connected", i);
        close(py[i]);
        py[i] = -1;
    }
    h = data_hdr(4, 0);
    cr_assert_eq(fgx_swlink_send(&lk, &h, "x"), -ENOTCONN);
    sleep_ms(RETRY_MS);
    fgx_swlink_resend(&lk, cfg); /* nobody listens */
    cr_assert_eq(fgx_swlink_send(&lk, &h, "x"), -ENOTCONN);
    cr_assert_eq(fgx_swlink_recv(&lk, &h, NULL, NULL), -EAGAIN);
    /* a new scriptworker */
    listen_all(2);
    sleep_ms(RETRY_MS);
    fgx_swlink_resend(&lk, cfg);
    accept_all();
    cr_assert_eq(lk.nprocs, 2);
    expect_hello(ctl);
    expect_hello(py[0]);
    expect_hello(py[1]);
    expect_files(py[0]);
    expect_files(py[1]);
    a = send_data(5, 0);
    b = send_data(6, 1);
    expect_data(py[0], &a);
    expect_data(py[1], &b);
    peer_none_all();
    h = verdict_hdr(&b, FGX_SW_DROP, 0);
    peer_send(py[1], &h, NULL);
    h = recv_ok(NULL, NULL);
    cr_assert_eq(h.conn, 6);
    cr_assert_eq(h.code, FGX_SW_DROP);
}

/* The largest frame is one message, with the CLOSEs queued ahead of it; a full socket refuses
 * a DATA frame (-EAGAIN) without counting it as a call. */
Test(swlink, the_largest_frame_goes_whole_and_a_full_socket_refuses)
{
    static uint8_t big[FGX_SW_MSG_MAX + 1];
    struct fgx_sw_hdr h, f, calls[64];
    unsigned n = 0, k, closes = 0;
    uint8_t *pl = malloc(FGX_SW_MAX_PAYLOAD);
    size_t off = 0;
    ssize_t got;
    int rv;

    cr_assert_not_null(pl);
    for (size_t i = 0; i < FGX_SW_MAX_PAYLOAD; i++)
        pl[i] = (uint8_t)(i * 7 + i / 251);
    ready();
    /* CLOSEs past the out queue's 16 KiB: the first ones go alone when it is full */
    for (k = 0; k < 700; k++) {
        h = (struct fgx_sw_hdr){.type = FGX_SW_CLOSE, .service = 12, .conn = 5000 + k};
        cr_assert_eq(fgx_swlink_send(&lk, &h, NULL), 0);
    }
    h = (struct fgx_sw_hdr){
        .type = FGX_SW_DATA, .service = 12, .conn = 1, .seq = ++lk.seq, .len = FGX_SW_MAX_PAYLOAD};
    cr_assert_eq(fgx_swlink_send(&lk, &h, pl), 0);
    /* the queue that filled, then the rest and the DATA */
    for (unsigned m = 0; m < 2; m++) {
        got = recv(py[0], big, sizeof(big), 0);
        cr_assert_gt(got, 0);
        for (off = 0; off < (size_t)got; off += sizeof(f) + f.len) {
            cr_assert_geq((size_t)got - off, sizeof(f));
            memcpy(&f, big + off, sizeof(f));
            if (f.type == FGX_SW_CLOSE) {
                cr_assert_eq(f.conn, 5000 + closes, "CLOSE out of order");
                closes++;
                continue;
            }
            cr_assert_eq(m, 1, "the DATA frame in the first message");
            cr_assert_eq(f.type, FGX_SW_DATA);
            cr_assert_eq(f.len, FGX_SW_MAX_PAYLOAD);
            cr_assert_eq(off + sizeof(f) + f.len, (size_t)got, "the DATA frame is not last");
            cr_assert(memcmp(big + off + sizeof(f), pl, FGX_SW_MAX_PAYLOAD) == 0);
        }
        if (m == 0)
            cr_assert_lt(closes, 700, "all the CLOSEs alone");
    }
    cr_assert_eq(closes, 700);
    peer_none_all();
    /* nobody reads interpreter 0: its socket fills */
    for (k = 0; k < 64; k++) {
        h = (struct fgx_sw_hdr){.type = FGX_SW_DATA,
                                .service = 12,
                                .conn = 10 + k,
                                .seq = ++lk.seq,
                                .len = FGX_SW_MAX_PAYLOAD};
        rv = fgx_swlink_send(&lk, &h, pl);
        if (rv == -EAGAIN)
            break;
        cr_assert_eq(rv, 0);
        calls[n++] = h;
    }
    cr_assert_lt(k, 64, "the socket never filled");
    cr_assert_gt(n, 0);
    cr_assert_eq(lk.py[0].ncalls, n + 1, "a refused frame counted as a call");
    /* what went arrives; the refused one does not */
    for (k = 0; k < n; k++) {
        got = recv(py[0], big, sizeof(big), 0);
        cr_assert_eq(got, (ssize_t)(sizeof(f) + FGX_SW_MAX_PAYLOAD));
        memcpy(&f, big, sizeof(f));
        cr_assert_eq(f.conn, calls[k].conn);
    }
    peer_none(py[0]);
    /* room again */
    h = send_data(99, 0);
    expect_data(py[0], &h);
    free(pl);
}

Test(swlink, a_full_calls_ring_refuses_data)
{
    struct fgx_sw_hdr first = {0}, h;
    unsigned got = 0;

    ready();
    for (unsigned k = 0; k < FGX_SWLINK_CALLS; k++) {
        h = data_hdr(1000 + k, 0);
        cr_assert_eq(fgx_swlink_send(&lk, &h, "x"), 0, "call %u refused", k);
        if (k == 0)
            first = h;
        if (k % 256 == 255)
            got += peer_drain(py[0]);
    }
    got += peer_drain(py[0]);
    cr_assert_eq(got, FGX_SWLINK_CALLS);
    h = data_hdr(9999, 0);
    cr_assert_eq(fgx_swlink_send(&lk, &h, "x"), -EAGAIN);
    peer_none(py[0]); /* refused by the link, not by a full socket: nothing went */
    /* the other interpreter is not concerned */
    h = send_data(9998, 1);
    expect_data(py[1], &h);
    /* one answered: room for one */
    h = verdict_hdr(&first, FGX_SW_ACCEPT, 0);
    peer_send(py[0], &h, NULL);
    h = recv_ok(NULL, NULL);
    cr_assert_eq(h.conn, 1000);
    h = send_data(9999, 0);
    expect_data(py[0], &h);
    h = data_hdr(10000, 0);
    cr_assert_eq(fgx_swlink_send(&lk, &h, "x"), -EAGAIN);
}

Test(swlink, log_queue_is_bounded_and_counts_losses)
{
    struct fgx_dp_stats st = {0};
    uint64_t lost0;

    cr_assert_eq(fgx_swlink_logs_take(&st), 0);
    lost0 = st.script_logs_lost;
    fgx_swlink_log_push(1, "print\0fn", 8, NULL); /* no second separator: ignored */
    for (int i = 0; i < FGX_SWLINK_LOG_MAX + 3; i++)
        fgx_swlink_log_push(1, "print\0f\0x", 9, NULL);
    st = (struct fgx_dp_stats){0};
    cr_assert_eq(fgx_swlink_logs_take(&st), 0);
    cr_assert_eq(st.nscript_logs, FGX_SWLINK_LOG_MAX);
    cr_assert_eq(st.script_logs_lost, lost0 + 3);
    cr_assert_str_eq(st.script_logs[0].text, "x");
    free_logs(&st);
    /* taken: the next take has none */
    cr_assert_eq(fgx_swlink_logs_take(&st), 0);
    cr_assert_eq(st.nscript_logs, 0);
    cr_assert_eq(st.script_logs_lost, lost0 + 3);
}

Test(swlink_procs, without_url_is_down)
{
    struct fgx_swlink down;
    struct fgx_sw_hdr h = {.type = FGX_SW_CLOSE};
    char url[200];

    cr_assert_eq(fgx_swlink_init(&down, NULL, 0), 0);
    cr_assert_not(down.up);
    cr_assert_eq(down.fd, -1);
    cr_assert_eq(fgx_swlink_send(&down, &h, NULL), -ENOTCONN);
    h.type = FGX_SW_DATA;
    cr_assert_eq(fgx_swlink_send(&down, &h, "x"), -ENOTCONN);
    cr_assert_eq(fgx_swlink_recv(&down, &h, NULL, NULL), -EAGAIN);
    fgx_swlink_switch(&down, cfg);
    cr_assert_eq(down.nsent, 0);
    fgx_swlink_resend(&down, cfg);
    fgx_swlink_release(&down);
    cr_assert_eq(fgx_swlink_init(&down, "", 0), 0);
    cr_assert_not(down.up);
    fgx_swlink_release(&down);
    /* a path a socket address cannot hold (PATH.15 must fit) */
    memset(url, 'a', sizeof(url) - 1);
    url[sizeof(url) - 1] = '\0';
    memcpy(url, "ipc:///", 7);
    cr_assert_eq(fgx_swlink_init(&down, url, 0), -ENAMETOOLONG);
    cr_assert_not(down.up);
    fgx_swlink_release(&down);
}

/* Nobody listens yet: init succeeds, sending is refused, and the link connects once scriptworker
 * is there. */
Test(swlink_procs, connects_when_scriptworker_comes)
{
    char tmpl[] = "/tmp/fgx-swlink-XXXXXX";
    char url[sizeof(path) + 16];
    struct fgx_sw_hdr h = data_hdr(1, 0);

    cr_assert_not_null(mkdtemp(tmpl));
    (void)snprintf(dir, sizeof(dir), "%s", tmpl);
    (void)snprintf(path, sizeof(path), "%s/sw", dir);
    (void)snprintf(url, sizeof(url), "ipc://%s", path);
    cr_assert_eq(fgx_swlink_init(&lk, url, LINK_ID), 0);
    cr_assert(lk.up);
    cr_assert_eq(fgx_swlink_send(&lk, &h, "x"), -ENOTCONN);
    fgx_swlink_switch(&lk, cfg);
    cr_assert_eq(lk.nsent, 2);
    listen_all(2);
    sleep_ms(RETRY_MS);
    fgx_swlink_resend(&lk, cfg);
    accept_all();
    expect_hello(ctl);
    expect_hello(py[0]);
    expect_hello(py[1]);
    expect_files(py[0]);
    expect_files(py[1]);
    h = send_data(2, 1);
    expect_data(py[1], &h);
    peer_none_all();
}

/* An interpreter that answers ERROR with FGX_SW_VERDICT_NOFILE (it has no file this link sent)
 * gets every file again before the link's next DATA frame to it, once for the calls sent before
 * the files went; the other interpreter is not sent them. */
Test(swlink, nofile_verdict_sends_the_files_again)
{
    struct fgx_sw_hdr call1, call2, h, next;

    ready();
    call1 = send_data(1, 0);
    call2 = send_data(2, 0);
    expect_data(py[0], &call1);
    expect_data(py[0], &call2);
    h = verdict_hdr(&call1, FGX_SW_ERROR, 0);
    h.hash = FGX_SW_VERDICT_NOFILE;
    peer_send(py[0], &h, NULL);
    h = verdict_hdr(&call2, FGX_SW_ERROR, 0);
    h.hash = FGX_SW_VERDICT_NOFILE;
    peer_send(py[0], &h, NULL);
    h = recv_ok(NULL, NULL);
    cr_assert_eq(h.code, FGX_SW_ERROR);
    h = recv_ok(NULL, NULL);
    cr_assert_eq(h.conn, 2);
    /* both were sent before the files went again: they go once */
    fgx_swlink_resend(&lk, cfg);
    expect_files(py[0]);
    next = send_data(3, 0);
    expect_data(py[0], &next);
    peer_none_all();
    /* an ERROR without the flag (a file that did not load) sends nothing again */
    h = verdict_hdr(&next, FGX_SW_ERROR, 0);
    peer_send(py[0], &h, NULL);
    (void)recv_ok(NULL, NULL);
    fgx_swlink_resend(&lk, cfg);
    peer_none_all();
}

static bool where_fn(void *arg, uint64_t conn, struct fgx_dp_script_log *e)
{
    (void)arg;
    if (conn != 42)
        return false;
    e->family = 4;
    memcpy(e->caddr, "\x0a\x00\x00\x02", 4);
    memcpy(e->saddr, "\x0a\x00\x00\x01", 4);
    e->cport = 40001;
    e->sport = 80;
    return true;
}

/* A LOG frame naming a connection (conn) gets its addresses from the owner's lookup; one for a
 * connection the owner no longer has, or naming none, carries none. */
Test(swlink, a_calls_log_entry_carries_its_connection)
{
    struct fgx_sw_hdr h;
    struct fgx_dp_stats st = {0};

    ready();
    lk.conn_fn = where_fn;
    h = (struct fgx_sw_hdr){.type = FGX_SW_LOG, .service = 12, .conn = 42, .len = 14};
    peer_send(py[0], &h, "exception\0f\0x");
    h.conn = 43;
    peer_send(py[0], &h, "exception\0f\0x");
    h.conn = 0;
    peer_send(py[0], &h, "exception\0f\0x");
    sleep_ms(50);
    cr_assert_eq(fgx_swlink_recv(&lk, &h, NULL, NULL), -EAGAIN);
    cr_assert_eq(fgx_swlink_logs_take(&st), 0);
    cr_assert_eq(st.nscript_logs, 3);
    cr_assert_eq(st.script_logs[0].family, 4);
    cr_assert_arr_eq(st.script_logs[0].caddr, "\x0a\x00\x00\x02", 4);
    cr_assert_arr_eq(st.script_logs[0].saddr, "\x0a\x00\x00\x01", 4);
    cr_assert_eq(st.script_logs[0].cport, 40001);
    cr_assert_eq(st.script_logs[0].sport, 80);
    cr_assert_eq(st.script_logs[1].family, 0);
    cr_assert_eq(st.script_logs[2].family, 0);
    free_logs(&st);
}
