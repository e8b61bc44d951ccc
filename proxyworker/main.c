/* proxyworker: options, the event-loop threads, then the control loop. Connections enter in
 * px_accept.c, are scanned in px_match.c and relayed in px_relay.c. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "fgx/log.h"
#include "fgx/wctl.h"
#include "px.h"

static struct px_worker worker;

static void usage(FILE *f)
{
    fprintf(f, "usage: proxyworker --control URL --listen-port P [--threads N] [--max-conns N]\n"
               "                   [--idle-timeout SECONDS] [--log-level L]\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"control", required_argument, NULL, 'c'},
        {"threads", required_argument, NULL, 't'},
        {"listen-port", required_argument, NULL, 'p'},
        {"max-conns", required_argument, NULL, 'm'},
        {"idle-timeout", required_argument, NULL, 'i'},
        {"log-level", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    enum fgx_log_level level = FGX_LOG_INFO;
    unsigned port = 0, idle_s = PX_IDLE_S_DEFAULT;
    const char *url = NULL;
    int c, ret;

    fgx_log_init("proxyworker", level);
    worker.nthreads = 1;
    worker.max_conns = PX_MAX_CONNS_DEFAULT;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'c': url = optarg; break;
        case 't':
            if (fgx_wctl_parse_uint(optarg, 1, 256, &worker.nthreads) != 0) {
                fprintf(stderr, "proxyworker: --threads: 1..256\n");
                return 2;
            }
            break;
        case 'p':
            if (fgx_wctl_parse_uint(optarg, 1, 65535, &port) != 0) {
                fprintf(stderr, "proxyworker: --listen-port: 1..65535\n");
                return 2;
            }
            break;
        case 'm':
            if (fgx_wctl_parse_uint(optarg, 1, 1000000, &worker.max_conns) != 0) {
                fprintf(stderr, "proxyworker: --max-conns: 1..1000000\n");
                return 2;
            }
            break;
        case 'i':
            if (fgx_wctl_parse_uint(optarg, 1, 86400, &idle_s) != 0) {
                fprintf(stderr, "proxyworker: --idle-timeout: 1..86400 seconds\n");
                return 2;
            }
            break;
        case 'l':
            if (fgx_log_level_parse(optarg, &level) != 0) {
                fprintf(stderr, "proxyworker: --log-level: error, warn, info or debug\n");
                return 2;
            }
            fgx_log_level_set(level);
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (url == NULL || port == 0 || optind != argc) {
        usage(stderr);
        return 2;
    }
    worker.port = (uint16_t)port;
    worker.idle_ms = idle_s * 1000u;
    fgx_wctl_signals(&worker.stop);

    if (px_worker_start(&worker) != 0)
        return 1;
    fgx_info("%u thread(s), port %u, at most %u connections, idle timeout %us, control %s",
             worker.nthreads, port, worker.max_conns, idle_s, url);
    ret = px_ctl_run(&worker, url) == 0 ? 0 : 1;
    px_worker_stop(&worker);
    return ret;
}
