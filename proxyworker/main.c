/* proxyworker: options, the event-loop threads, then the control loop. Connections enter in
 * px_accept.c, are scanned in px_match.c and relayed in px_relay.c. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "fgx/log.h"
#include "fgx/priv.h"
#include "fgx/wctl.h"
#include "px.h"

static struct px_worker worker;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: proxyworker --control URL --listen-port P [--threads N] [--max-conns N]\n"
            "                   [--max-conns-per-src N] [--first-byte-timeout SECONDS]\n"
            "                   [--idle-timeout SECONDS] [--udp-idle SECONDS] [--log-level L]\n"
            "                   [--user NAME]\n"
            "--user  the user it runs as once its listeners are open (default %s)\n"
            "--max-conns  open connections at most (default: 1/%u of memory at %u KiB each,\n"
            "          within %u..%u and the descriptor limit); at the limit the most idle\n"
            "          connection is closed for a new one.\n"
            "--max-conns-per-src  open connections per client address, IPv6 per /64 (default\n"
            "          %u; 0: no limit); at the limit its most idle one is closed for a new one.\n"
            "--first-byte-timeout  close a connection where neither side sent a byte (default\n"
            "          %us; 0: only the idle timeout, default %us).\n"
            "--udp-idle  a UDP flow goes after this long without a datagram (default %us).\n",
            FGX_PRIV_USER_DEFAULT, PX_MEM_SHARE, PX_CONN_COST >> 10, PX_MAX_CONNS_MIN, PX_MAX_CONNS_MAX,
            PX_MAX_PER_SRC_DEFAULT, PX_FIRST_BYTE_S_DEFAULT, PX_IDLE_S_DEFAULT,
            PX_UDP_IDLE_S_DEFAULT);
}

/* Two descriptors per connection: take all the hard limit allows, and the default connection
 * limit from memory within it. Returns the descriptor limit now (0: unknown). */
static uint64_t raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == -1)
        return 0;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;

        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) == -1 && getrlimit(RLIMIT_NOFILE, &rl) == -1)
            return 0;
    }
    return rl.rlim_cur == RLIM_INFINITY ? 0 : (uint64_t)rl.rlim_cur;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"control", required_argument, NULL, 'c'},
        {"threads", required_argument, NULL, 't'},
        {"listen-port", required_argument, NULL, 'p'},
        {"max-conns", required_argument, NULL, 'm'},
        {"max-conns-per-src", required_argument, NULL, 's'},
        {"first-byte-timeout", required_argument, NULL, 'f'},
        {"idle-timeout", required_argument, NULL, 'i'},
        {"udp-idle", required_argument, NULL, 'I'},
        {"log-level", required_argument, NULL, 'l'},
        {"script-url", required_argument, NULL, 'S'},
        {"user", required_argument, NULL, 'u'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    enum fgx_log_level level = FGX_LOG_INFO;
    unsigned port = 0, idle_s = PX_IDLE_S_DEFAULT, first_s = PX_FIRST_BYTE_S_DEFAULT;
    unsigned udp_idle_s = PX_UDP_IDLE_S_DEFAULT;
    uint64_t nofile;
    long pages, page;
    const char *url = NULL, *user = FGX_PRIV_USER_DEFAULT;
    int c, ret;

    fgx_log_init("proxyworker", level);
    worker.nthreads = 1;
    worker.max_per_src = PX_MAX_PER_SRC_DEFAULT;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'c': url = optarg; break;
        case 'S': worker.script_url = optarg; break;
        case 'u': user = optarg; break;
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
        case 's':
            if (fgx_wctl_parse_uint(optarg, 0, 1000000, &worker.max_per_src) != 0) {
                fprintf(stderr, "proxyworker: --max-conns-per-src: 0..1000000\n");
                return 2;
            }
            break;
        case 'f':
            if (fgx_wctl_parse_uint(optarg, 0, 86400, &first_s) != 0) {
                fprintf(stderr, "proxyworker: --first-byte-timeout: 0..86400 seconds\n");
                return 2;
            }
            break;
        case 'I':
            if (fgx_wctl_parse_uint(optarg, 1, 3600, &udp_idle_s) != 0) {
                fprintf(stderr, "proxyworker: --udp-idle: 1..3600 seconds\n");
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
    worker.udp_idle_ms = udp_idle_s * 1000u;
    worker.first_byte_ms = first_s * 1000u;
    nofile = raise_nofile();
    pages = sysconf(_SC_PHYS_PAGES);
    page = sysconf(_SC_PAGE_SIZE);
    if (worker.max_conns == 0)
        worker.max_conns = px_max_conns_default(
            pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0, nofile);
    else if (nofile > 128 && worker.max_conns > (nofile - 64) / 2)
        fgx_warn("--max-conns %u needs %u descriptors, the limit is %llu: accept() will fail "
                 "before the limit",
                 worker.max_conns, worker.max_conns * 2, (unsigned long long)nofile);
    fgx_wctl_signals(&worker.stop);
    if (px_tls_init() != 0)
        return 1;

    if (px_worker_open(&worker) != 0)
        return 1;
    /* the statistics' memory figure is read through a file opened now, before the drop */
    if (fgx_wstats_open() != 0 || px_priv_drop(user) != 0 || px_worker_start(&worker) != 0) {
        px_worker_stop(&worker);
        return 1;
    }
    fgx_info("%u thread(s), port %u, at most %u connections (%u per source), first-byte "
             "timeout %us, idle timeout %us, control %s",
             worker.nthreads, port, worker.max_conns, worker.max_per_src, first_s, idle_s, url);
    ret = px_ctl_run(&worker, url) == 0 ? 0 : 1;
    px_worker_stop(&worker);
    return ret;
}
