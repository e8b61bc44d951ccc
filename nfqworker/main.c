/* nfqworker: options, threads, then the control loop. The packet path starts in nfq_recv.c. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgx/log.h"
#include "fgx/priv.h"
#include "fgx/wctl.h"
#include "nfq.h"

static struct nfq_worker worker;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: nfqworker --control URL --threads N --queue-base B [--log-level L]\n"
            "                 [--no-synack-log] [--flows N] [--script-url URL]\n"
            "                 [--script-flows N] [--udp-idle S] [--user NAME]\n"
            "--flows  TCP flows tracked per thread (default %u)\n"
            "--script-flows  flows per thread a script keeps state for (default %u)\n"
            "--udp-idle  seconds a scripted UDP flow lasts without a datagram (default %u)\n"
            "--user  the user it runs as once its queues are open (default %s)\n",
            NFQ_FLOWS_PER_THREAD, NFQ_SW_FLOWS_DEFAULT, NFQ_UDP_IDLE_MS / 1000,
            FGX_PRIV_USER_DEFAULT);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"control", required_argument, NULL, 'c'},
        {"threads", required_argument, NULL, 't'},
        {"queue-base", required_argument, NULL, 'q'},
        {"log-level", required_argument, NULL, 'l'},
        {"no-synack-log", no_argument, NULL, 'S'},
        {"flows", required_argument, NULL, 'F'},
        {"script-url", required_argument, NULL, 'U'},
        {"script-flows", required_argument, NULL, 'W'},
        {"udp-idle", required_argument, NULL, 'I'},
        {"user", required_argument, NULL, 'u'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    enum fgx_log_level level = FGX_LOG_INFO;
    const char *url = NULL, *user = FGX_PRIV_USER_DEFAULT;
    unsigned i, ninit = 0;
    int c, ret = 1;

    fgx_log_init("nfqworker", level);
    worker.nthreads = 1;
    worker.queue_fd = -1;
    worker.queue_base = FGX_QUEUE_BASE_DEFAULT;
    worker.flows = NFQ_FLOWS_PER_THREAD;
    worker.script_flows = NFQ_SW_FLOWS_DEFAULT;
    worker.udp_idle_ms = NFQ_UDP_IDLE_MS;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'c': url = optarg; break;
        case 't':
            if (fgx_wctl_parse_uint(optarg, 1, 256, &worker.nthreads) != 0) {
                fprintf(stderr, "nfqworker: --threads: 1..256\n");
                return 2;
            }
            break;
        case 'q':
            if (fgx_wctl_parse_uint(optarg, 0, 65535 - 512, &worker.queue_base) != 0) {
                fprintf(stderr, "nfqworker: --queue-base: 0..65023\n");
                return 2;
            }
            break;
        case 'l':
            if (fgx_log_level_parse(optarg, &level) != 0) {
                fprintf(stderr, "nfqworker: --log-level: error, warn, info or debug\n");
                return 2;
            }
            fgx_log_level_set(level);
            break;
        case 'S': worker.no_synack_log = true; break;
        case 'U': worker.script_url = optarg; break;
        case 'u': user = optarg; break;
        case 'F':
            if (fgx_wctl_parse_uint(optarg, 16, 1u << 24, &worker.flows) != 0) {
                fprintf(stderr, "nfqworker: --flows: 16..16777216\n");
                return 2;
            }
            break;
        case 'W':
            if (fgx_wctl_parse_uint(optarg, 16, 1u << 20, &worker.script_flows) != 0) {
                fprintf(stderr, "nfqworker: --script-flows: 16..1048576\n");
                return 2;
            }
            break;
        case 'I': {
            unsigned sec;

            if (fgx_wctl_parse_uint(optarg, 1, 3600, &sec) != 0) {
                fprintf(stderr, "nfqworker: --udp-idle: 1..3600 seconds\n");
                return 2;
            }
            worker.udp_idle_ms = sec * 1000u;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (url == NULL || optind != argc) {
        usage(stderr);
        return 2;
    }
    fgx_wctl_signals(&worker.stop);

    worker.threads = calloc(worker.nthreads, sizeof(*worker.threads));
    if (worker.threads == NULL) {
        fgx_err("out of memory");
        return 1;
    }
    for (ninit = 0; ninit < worker.nthreads; ninit++)
        if (nfq_thread_init(&worker, &worker.threads[ninit], ninit) != 0)
            goto out;
    /* the statistics' memory figure and the kernel's queue drops are read through files
     * opened now, before the drop */
    nfq_stats_open(&worker);
    if (fgx_wstats_open() != 0 || nfq_priv_drop(user) != 0)
        goto out;
    for (i = 0; i < worker.nthreads; i++) {
        ret = pthread_create(&worker.threads[i].tid, NULL, nfq_thread_main, &worker.threads[i]);
        if (ret != 0) {
            fgx_err("pthread_create: %s", strerror(ret));
            ret = 1;
            goto out;
        }
        worker.threads[i].started = true;
    }
    fgx_info("%u thread(s), queues %u..%u, control %s", worker.nthreads, worker.queue_base,
             worker.queue_base + 2 * worker.nthreads - 1, url);
    ret = nfq_ctl_run(&worker, url) == 0 ? 0 : 1;
out:
    __atomic_store_n(&worker.stop, 1, __ATOMIC_RELEASE);
    for (i = 0; i < worker.nthreads; i++) {
        if (worker.threads[i].started) {
            nfq_thread_wake(&worker.threads[i]);
            pthread_join(worker.threads[i].tid, NULL);
        }
    }
    for (i = 0; i < ninit; i++)
        nfq_thread_release(&worker.threads[i]);
    fgx_wcfg_unref(worker.current);
    free(worker.threads);
    return ret;
}
