/* fgexctl transport stage: the Request from cli_args.c packed and sent to controld over a REQ
 * channel, and its Reply unpacked for cli_fmt.c. Failures are the user's to read, so they are
 * put into words for fgexctl's one-line reason rather than logged. */
#include "cli_rpc.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_args.h"
#include "cli_pin.h"
#include "cli_session.h"
#include "cli_tls.h"
#include "fgx/chan.h"
#include "fgx/chan_tls.h"

void cli_rpc_init(struct cli_rpc *r, const char *url)
{
    memset(r, 0, sizeof(*r));
    r->url = url;
    r->wait_s = CLI_WAIT_DEFAULT_S;
}

void cli_rpc_set_trust(struct cli_rpc *r, const char *fingerprint, const char *ca)
{
    r->fingerprint = fingerprint;
    r->ca = ca;
}

/* Drops the connection only: the token stays for the next call. */
static void rpc_disconnect(struct cli_rpc *r)
{
    fgx_chan_close(r->chan);
    r->chan = NULL;
}

void cli_rpc_release(struct cli_rpc *r)
{
    rpc_disconnect(r);
    if (r->token) {
        explicit_bzero(r->token, strlen(r->token));
        free(r->token);
        r->token = NULL;
    }
}

static void rpc_load_token(struct cli_rpc *r)
{
    char path[4096];

    r->token_loaded = true;
    /* No session is the normal case (local socket, or not logged in yet). */
    if (cli_session_find(r->url, path, sizeof(path)) == 0 && cli_session_load(path, &r->token) < 0)
        r->token = NULL;
}

static int rpc_dial_chan(struct cli_rpc *r);

/* nng starts its I/O threads with the first dial, and they inherit this thread's signal mask:
 * with SIGPIPE blocked there, a server that closes the connection mid-handshake (controld
 * closes connections that stay silent too long) is an error to report, not a silent death. */
static int rpc_dial(struct cli_rpc *r)
{
    sigset_t pipe, old;
    int rc;

    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &old);
    rc = rpc_dial_chan(r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

static int rpc_dial_chan(struct cli_rpc *r)
{
    struct cli_tls_trust tr;
    int rc;

    if (!cli_pin_is_tls(r->url)) {
        rc = fgx_chan_dial(r->url, FGX_CHAN_REQ, CLI_RPC_DIAL_MS, &r->chan);
        if (rc < 0)
            (void)snprintf(r->err, sizeof(r->err), "cannot reach controld at %s: %s%s", r->url,
                           strerror(-rc), rc == -ECONNREFUSED ? " (is controld running?)" : "");
        return rc;
    }
    rc = cli_tls_trust_setup(r->url, r->fingerprint, r->ca, &tr, r->err, sizeof(r->err));
    if (rc < 0)
        return rc;
    rc = fgx_chan_dial_tls(r->url, FGX_CHAN_REQ, tr.ca_path, tr.server_name, CLI_RPC_DIAL_MS,
                           &r->chan);
    if (rc == -EKEYREJECTED)
        (void)snprintf(r->err, sizeof(r->err),
                       "the TLS certificate of %.200s was refused: it does not match %s%.600s",
                       r->url, tr.pinned ? "the pinned certificate " : "the name or CA in ",
                       tr.ca_path);
    else if (rc < 0)
        (void)snprintf(r->err, sizeof(r->err), "cannot reach controld at %s: %s%s", r->url,
                       strerror(-rc),
                       rc == -ECONNREFUSED || rc == -ECONNRESET
                           ? " (is controld listening there, and are you in its --allow list?)"
                           : "");
    return rc;
}

static int rpc_request_once(struct cli_rpc *r, const Fgx__Ctl__Request *req, int timeout_ms,
                            Fgx__Ctl__Reply **out)
{
    uint8_t *buf = NULL;
    void *rbuf = NULL;
    size_t len, rlen = 0;
    Fgx__Ctl__Reply *rep;
    Fgx__Ctl__Request q = *req;
    int rc;

    if (!r->chan) {
        rc = rpc_dial(r);
        if (rc < 0) {
            r->chan = NULL;
            goto out;
        }
    }
    /* After the dial: a session is keyed by the certificate pinned for the URL
     * (cli_session.c), which the first dial may just have pinned. */
    if (!r->token_loaded)
        rpc_load_token(r);
    if (r->token && !q.token)
        q.token = r->token;
    req = &q;
    len = fgx__ctl__request__get_packed_size(req);
    buf = malloc(len ? len : 1);
    if (!buf) {
        rc = -ENOMEM;
        (void)snprintf(r->err, sizeof(r->err), "out of memory");
        goto out;
    }
    fgx__ctl__request__pack(req, buf);
    rc = fgx_chan_call(r->chan, buf, len, &rbuf, &rlen, timeout_ms);
    if (rc == -ETIMEDOUT) {
        /* controld closes a connection from outside its --allow list before reading a
         * request; nng then just waits for a peer. */
        bool dropped = cli_pin_is_tls(r->url) && fgx_chan_peers(r->chan) == 0;

        (void)snprintf(r->err, sizeof(r->err), "no reply from controld at %s within %d s%s", r->url,
                       timeout_ms / 1000,
                       dropped ? ": it closed the connection (is this machine in its --allow "
                                 "list?)"
                               : "");
        goto out;
    }
    if (rc < 0) {
        (void)snprintf(r->err, sizeof(r->err), "cannot reach controld at %s: %s%s", r->url,
                       strerror(-rc),
                       rc == -ECONNRESET && cli_pin_is_tls(r->url)
                           ? " (it closed the connection: is this machine in its --allow list?)"
                           : "");
        goto out;
    }
    rep = fgx__ctl__reply__unpack(NULL, rlen, rbuf);
    if (!rep) {
        rc = -EBADMSG;
        (void)snprintf(r->err, sizeof(r->err), "controld at %s sent a reply that does not decode",
                       r->url);
        goto out;
    }
    *out = rep;
out:
    /* A REQ socket that failed may still hold the request; a fresh one starts clean. */
    if (rc < 0)
        rpc_disconnect(r);
    free(rbuf);
    free(buf);
    return rc;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* controld compiles one change at a time and refuses another meanwhile, saying what compiles
 * (Reply.busy): the change is sent again every WAIT_STEP_MS until it gets its turn or --wait
 * runs out, with a line on stderr once the wait is noticeable. */
#define WAIT_STEP_MS 200
#define WAIT_NOTE_MS 1000

int cli_rpc_request(struct cli_rpc *r, const Fgx__Ctl__Request *req, int timeout_ms,
                    Fgx__Ctl__Reply **out)
{
    uint64_t t0 = mono_ms(), note_at = t0 + WAIT_NOTE_MS, limit = (uint64_t)r->wait_s * 1000;
    bool tty = isatty(STDERR_FILENO) == 1, noted = false;
    int rc;

    for (;;) {
        Fgx__Ctl__Reply *rep = NULL;
        uint64_t now, left;
        bool blocked;

        rc = rpc_request_once(r, req, timeout_ms, &rep);
        if (rc < 0 || !rep->has_busy || !rep->busy || limit == 0) {
            if (rc == 0)
                *out = rep;
            break;
        }
        blocked = rep->has_busy_blocked && rep->busy_blocked;
        now = mono_ms();
        if (now - t0 >= limit) {
            if (blocked)
                (void)snprintf(r->err, sizeof(r->err),
                               "controld at %.300s did not answer: its control loop has been "
                               "blocked for %u s (its log says where); gave up after --wait %u "
                               "s: nothing was run, send it again",
                               r->url, rep->busy_secs, r->wait_s);
            else
                (void)snprintf(r->err, sizeof(r->err),
                               "controld at %.300s is still compiling another change (%.200s, "
                               "for %u s); gave up after --wait %u s: nothing was changed, send "
                               "it again (or wait longer with --wait SECS)",
                               r->url, rep->busy_what ? rep->busy_what : "?", rep->busy_secs,
                               r->wait_s);
            fgx__ctl__reply__free_unpacked(rep, NULL);
            rc = -EBUSY;
            break;
        }
        if (now >= note_at) {
            /* On a terminal one line counts up; in a log, a line every few seconds. */
            (void)fprintf(stderr, "%s" CLI_PROG ": waiting for controld: %s%.200s (%u s)%s",
                          tty && noted ? "\r\033[K" : "", blocked ? "" : "compiling ",
                          blocked ? "its control loop is blocked"
                          : rep->busy_what ? rep->busy_what
                                           : "another change",
                          rep->busy_secs, tty ? "" : "\n");
            (void)fflush(stderr);
            noted = true;
            note_at = now + (tty ? WAIT_NOTE_MS : 5 * WAIT_NOTE_MS);
        }
        fgx__ctl__reply__free_unpacked(rep, NULL);
        left = limit - (now - t0);
        (void)usleep((useconds_t)(left < WAIT_STEP_MS ? left : WAIT_STEP_MS) * 1000);
    }
    if (noted && tty)
        (void)fputc('\n', stderr);
    return rc;
}

void cli_rpc_set_wait(struct cli_rpc *r, unsigned secs)
{
    r->wait_s = secs;
}

int cli_rpc_call(const char *url, const Fgx__Ctl__Request *req, int timeout_ms,
                 Fgx__Ctl__Reply **out)
{
    struct cli_rpc r;
    int rc;

    cli_rpc_init(&r, url);
    rc = cli_rpc_request(&r, req, timeout_ms, out);
    if (rc < 0)
        (void)fprintf(stderr, CLI_PROG ": %s\n", r.err);
    cli_rpc_release(&r);
    return rc;
}
