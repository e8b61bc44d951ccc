/* scriptworker: runs the services' Python filter files (sw.h). Options:
 *   --listen URL        where data-path workers dial it: URL-0 .. URL-(N-1), one nng pair1
 *                       socket per data-path thread
 *   --peers N           how many (default 16)
 *   --procs N           Python interpreters (default 2)
 *   --python-dir DIR    the fgex package (scriptworker/python)
 *   --log-level LEVEL */
#include "sw.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/protocol/pair1/pair.h>
#include <stdbool.h>

#include "fgx/log.h"
#include "fgx/wctl.h"

static int stop_flag;

static int usage(void)
{
    (void)fputs("usage: scriptworker --listen URL --python-dir DIR [--procs N] [--peers N] "
                "[--log-level LEVEL]\n",
                stderr);
    return 2;
}

int main(int argc, char **argv)
{
    struct sw w;
    const char *listen = NULL, *level = "info";
    unsigned procs = SW_PROCS_DEFAULT, peers = SW_PEERS_DEFAULT;
    int rv;

    memset(&w, 0, sizeof(w));
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--listen") == 0)
            listen = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--python-dir") == 0)
            w.pydir = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--log-level") == 0)
            level = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--peers") == 0) {
            if (fgx_wctl_parse_uint(argv[++i], 1, SW_PEERS_MAX, &peers) < 0)
                return usage();
        } else if (i + 1 < argc && strcmp(argv[i], "--procs") == 0) {
            if (fgx_wctl_parse_uint(argv[++i], 1, SW_PROCS_MAX, &procs) < 0)
                return usage();
        } else
            return usage();
    }
    if (!listen || !w.pydir)
        return usage();
    {
        enum fgx_log_level lv = FGX_LOG_INFO;

        if (fgx_log_level_parse(level, &lv) < 0)
            return usage();
        fgx_log_init("scriptworker", lv);
    }
    fgx_wctl_signals(&stop_flag);
    w.stop = &stop_flag;
    w.nprocs = procs;
    for (unsigned i = 0; i < procs; i++)
        w.child[i].in = w.child[i].out = w.child[i].page_fd = -1;
    w.npeers = peers;
    for (unsigned i = 0; i < peers; i++) {
        char url[4200];

        (void)snprintf(url, sizeof(url), "%s-%u", listen, i);
        rv = nng_pair1_open(&w.socks[i]);
        if (rv == 0)
            rv = nng_socket_set_int(w.socks[i], NNG_OPT_SENDBUF, 8192);
        if (rv == 0)
            rv = nng_socket_set_int(w.socks[i], NNG_OPT_RECVBUF, 8192);
        if (rv == 0)
            rv = nng_socket_set_ms(w.socks[i], NNG_OPT_SENDTIMEO, SW_SEND_MS);
        if (rv == 0)
            rv = nng_listen(w.socks[i], url, NULL, 0);
        if (rv == 0)
            rv = nng_socket_get_int(w.socks[i], NNG_OPT_RECVFD, &w.recv_fds[i]);
        if (rv != 0) {
            fgx_err("cannot listen on %s: %s", url, nng_strerror(rv));
            return 1;
        }
    }
    fgx_info("listening on %s-0..%u with %u Python interpreter(s)", listen, peers - 1, procs);
    rv = sw_loop_run(&w);
    for (unsigned i = 0; i < procs; i++) {
        /* the buffers outlive an interpreter (kept for the next one): freed here */
        sw_child_kill(&w.child[i]);
        free(w.child[i].wbuf);
        free(w.child[i].rbuf);
    }
    for (size_t i = 0; i < w.nscripts; i++)
        free(w.scripts[i].frame);
    free(w.scripts);
    for (unsigned i = 0; i < peers; i++)
        nng_close(w.socks[i]);
    return rv < 0 ? 1 : 0;
}
