/* controld: parses options, daemonizes, wires the store, nftables, the worker supervisor, the
 * statistics, the metrics server and the control channel together, and runs the loop that
 * serves fgexctl, supervises the worker and collects its counters. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "controld/ctl_apply.h"
#include "controld/ctl_auth.h"
#include "controld/ctl_compile.h"
#include "controld/ctl_conffile.h"
#include "controld/ctl_priv.h"
#include "controld/ctl_fw.h"
#include "controld/ctl_game.h"
#include "controld/ctl_health_gap.h"
#include "controld/ctl_health_store.h"
#include "controld/ctl_health.h"
#include "controld/ctl_history.h"
#include "controld/ctl_listen.h"
#include "controld/ctl_loopwatch.h"
#include "controld/ctl_metrics.h"
#include "controld/ctl_nft.h"
#include "controld/ctl_nftwatch.h"
#include "controld/ctl_rpc.h"
#include "controld/ctl_script_rt.h"
#include "controld/ctl_script_sup.h"
#include "controld/ctl_stats.h"
#include "controld/ctl_store.h"
#include "controld/ctl_supervise.h"
#include "controld/ctl_tls.h"
#include "controld/ctl_web.h"
#include "controld/ctl_web_conn.h"
#include "fgx/chan.h"
#include "fgx/chan_relay.h"
#include "fgx/chan_tls.h"
#include "fgx/dp.h"
#include "fgx/log.h"
#include "fgx/priv.h"
#include "fgx/version.h"

#define LOOP_RECV_MS 100
#define LOOP_COMPILE_MS 10 /* the loop's pace while a compile runs: its result is soon seen */
#define COMPILE_ROUNDS_MAX 3
#define STATS_PERIOD_MS 1000
/* While events keep coming (a burst of blocks), the workers are asked this often, so that
 * their event queues are emptied long before they fill. */
#define STATS_BURST_MS 100
#define STATS_TIMEOUT_MS 500
#define RETRY_PERIOD_MS 5000
#define RETRY_TIMEOUT_MS 1000
#define PROXY_PORT_DEFAULT 15001 /* proxyworker's port, where the tproxy rules send traffic */

struct opts {
    const char *state_dir, *run_dir, *log_level, *metrics_listen;
    unsigned threads, queue_base;
    unsigned proxy_port, proxy_max_conns;
    bool has_proxy_per_src, has_proxy_first_byte; /* set on the command line (0 is a value) */
    unsigned proxy_per_src, proxy_first_byte;
    bool foreground;
    const char *listen, *cert, *key; /* remote control: tls+tcp:// */
    const char *web_listen;          /* the dashboard: HTTPS, ADDR:PORT */
    const char *allow[CTL_AUTH_ALLOW_MAX];
    size_t nallow;
    bool local_auth, init_password;
    bool no_synack_log;
    unsigned compile_timeout; /* seconds */
    unsigned nfq_flows;
    unsigned nfq_script_flows; /* 0: the worker's default */
    unsigned udp_idle;         /* seconds; 0: the workers' default */
    unsigned events_keep;
    unsigned history_keep;
    unsigned captures_keep;
    unsigned handshake_s; /* --handshake-timeout */
    unsigned web_max_conns, web_max_per_src; /* issue 24 */
    const char *user;     /* --user: the workers' (ctl_priv.h) */
    unsigned script_uid, script_mem_mib;
    /* issue 28: the game, applied to the store at each start when --game-flag is given */
    const char *game_flag;
    char *game_addrs[2][CTL_GAME_ADDRS_MAX]; /* --game-checker, --game-team */
    size_t ngame_addrs[2];
};

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: controld [--state-dir DIR] [--run-dir DIR] [--threads N] [--foreground]\n"
        "                [--log-level error|warn|info|debug] [--queue-base B]\n"
        "                [--metrics-listen ADDR:PORT] [--proxy-port P] [--proxy-max-conns N]\n"
        "                [--proxy-max-conns-per-src N] [--proxy-first-byte-timeout SECONDS]\n"
        "                [--listen tls+tcp://ADDR:PORT [--cert FILE --key FILE]]\n"
        "                [--web-listen ADDR:PORT [--web-max-conns N] [--web-max-per-src N]]\n"
        "                [--allow CIDR]... [--handshake-timeout SEC] [--local-auth]\n"
        "                [--init-password] [--no-synack-log] [--compile-timeout SECONDS]\n"
        "                [--nfq-flows N] [--nfq-script-flows N] [--events-keep N]\n"
        "                [--history-keep N] [--user NAME] [--script-uid UID]\n"
        "                [--script-memory MIB]\n"
        "                [--game-flag REGEX --game-checker CIDR... [--game-team CIDR]...]\n"
        "                [--config FILE] [--version]\n"
        "                [--help]\n"
        "defaults: --state-dir /var/lib/fgex --run-dir /run/fgex --threads <online CPUs>\n"
        "          --log-level info --queue-base %u\n"
        "--config  read settings from FILE (default " CTL_CONFFILE_DEFAULT ", if it exists):\n"
        "          `key = value` lines, a key per long option (`allow` may repeat, flags take\n"
        "          true or false), `#` comment lines; the command line wins.\n"
        "--metrics-listen serves Prometheus metrics (text format) at http://ADDR:PORT/metrics,\n"
        "          e.g. 127.0.0.1:9100, [::1]:9100 or :9100 (every address); off by default.\n"
        "          Anyone who reaches it sees the counters and service names: bind it to a\n"
        "          trusted address.\n"
        "--listen  also serves fgexctl over TLS (never plain TCP); the certificate is\n"
        "          STATE_DIR/tls-cert.pem, made on first start, unless --cert/--key name one.\n"
        "          Remote clients must log in (fgexctl login) while auth is on (the default).\n"
        "--web-listen  serves the web dashboard and its JSON API over HTTPS at\n"
        "          https://ADDR:PORT/ (never plain HTTP), with --listen's certificate, password,\n"
        "          sessions and --allow list; also /metrics. Off by default.\n"
        "--allow   only these peers may connect to --listen and --web-listen (repeatable;\n"
        "          default: any).\n"
        "--web-max-conns  the dashboard's connections at most (default %u, 64..1000000, within\n"
        "          the open-files limit); --web-max-per-src from one address (IPv6: a /64;\n"
        "          default %u). Past either, that address's (or the one holding the most's)\n"
        "          idle or silent connections are closed for the new one; an address with none\n"
        "          open always gets in (an eighth is kept for such). Live streams: %u per\n"
        "          session, %u per address, a quarter of --web-max-conns in all (then 429/503).\n"
        "--handshake-timeout  a --listen or --web-listen connection that has not sent its\n"
        "          first request this many seconds after it connected (the TLS handshake\n"
        "          included) is closed (default %u); so are, past %u such --listen\n"
        "          connections from one address, those that sent nothing, then the oldest,\n"
        "          and past %u in all, those of the address holding the most.\n"
        "--user    the workers run as NAME once their sockets are open (default fgex,\n"
        "          created as a system user at start when missing).\n"
        "--script-uid  the filter files run as UID+0.. (an interpreter each) and UID+16 (the\n"
        "          check at `script set`): ids no user has (default %u).\n"
        "--script-memory  the address-space limit of each, MiB (default %u).\n"
        "--game-flag, --game-checker, --game-team  the game's flag format and the checker's\n"
        "          and teams' addresses (each address option repeats), as `fgexctl game set`\n"
        "          sets them: given, they replace the stored game at every start.\n"
        "--local-auth  the local socket needs a login too.\n"
        "--init-password  set the password from the first line of stdin, then start.\n"
        "--proxy-port  where proxyworker listens for the proxy layer's connections (default\n"
        "          %u); --proxy-max-conns its limit of open connections (default: from the\n"
        "          memory, 1/8 of it at 24 KiB a connection, within 1024..1000000 and the\n"
        "          descriptor limit); at the limit the most idle connection (first: one where\n"
        "          nothing was sent yet) is closed for the new one.\n"
        "--proxy-max-conns-per-src  open proxied connections per client address, IPv6 per\n"
        "          /64 (default 256, kept per worker thread as its share; 0: no limit); at the\n"
        "          limit that address's most idle connection is closed for its new one.\n"
        "--proxy-first-byte-timeout  close a proxied connection where neither side sent a\n"
        "          byte within SECONDS (default 10; 0: only the 600 s idle timeout).\n"
        "--no-synack-log  queue the server's SYN-ACK instead of copying it to the worker (one\n"
        "          queue trip more per connection); chosen by itself on a\n"
        "          kernel without the nftables log expression.\n"
        "--compile-timeout  longest a change may spend compiling its regexes (default %u,\n"
        "          1..%u); a longer one is stopped and refused, nothing stored. Compiles run\n"
        "          in child processes, so controld keeps answering meanwhile.\n"
        "--nfq-flows  TCP flows the nfq worker tracks per thread (default 65536; a quarter\n"
        "          of them at most embryonic: handshakes without data yet).\n"
        "--nfq-script-flows  connections per nfq worker thread a script filter keeps\n"
        "          state for at once (default 16384, 16..1048576; docs/scripts.md).\n"
        "--udp-idle  seconds a UDP flow's state (a script's, the proxy's relay) lasts without\n"
        "          a datagram (default 30, 1..3600).\n"
        "--events-keep  block events kept (in memory and in the state store; default %u,\n"
        "          1..%u); the oldest go first. An event takes ~300 bytes in each.\n"
        "--history-keep  changes kept in the change history (fgexctl history, undo;\n"
        "          default %u, 1..%u); each holds the configuration before it.\n"
        "--captures-keep  blocked connections' captures kept in the state store (default\n"
        "          %u, 0..%u; 0: none); the oldest go first. One takes up to twice its\n"
        "          service's capture bytes (16 KiB by default) plus ~2 KiB.\n",
        FGX_QUEUE_BASE_DEFAULT, CTL_WEB_MAX_CONNS, CTL_WEB_MAX_PER_SRC, CTL_WEB_STREAMS_PER_SESSION,
        CTL_WEB_STREAMS_PER_SRC, CTL_AUTH_HANDSHAKE_S_DEFAULT, CTL_AUTH_PENDING_PER_PEER,
        CTL_AUTH_PENDING_MAX,
        CTL_PRIV_SCRIPT_UID_DEFAULT, CTL_PRIV_SCRIPT_MEM_MIB_DEFAULT,
        PROXY_PORT_DEFAULT, CTL_COMPILE_TIMEOUT_DEFAULT, CTL_COMPILE_TIMEOUT_MAX,
        (unsigned)CTL_EVENTS_KEEP, (unsigned)CTL_EVENTS_KEEP_MAX, (unsigned)CTL_HISTORY_KEEP,
        (unsigned)CTL_HISTORY_KEEP_MAX, (unsigned)CTL_CAPTURES_KEEP,
        (unsigned)CTL_CAPTURES_KEEP_MAX);
}

static int parse_uint(const char *s, unsigned min, unsigned max, unsigned *out)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -EINVAL;
    *out = (unsigned)v;
    return 0;
}

/* Every long option is also a key of the configuration file (ctl_conffile.h). */
static const struct option longopts[] = {
    {"state-dir", required_argument, NULL, 's'},
    {"run-dir", required_argument, NULL, 'r'},
    {"threads", required_argument, NULL, 't'},
    {"foreground", no_argument, NULL, 'f'},
    {"log-level", required_argument, NULL, 'l'},
    {"queue-base", required_argument, NULL, 'q'},
    {"proxy-port", required_argument, NULL, 'p'},
    {"proxy-max-conns", required_argument, NULL, 'M'},
    {"proxy-max-conns-per-src", required_argument, NULL, 'N'},
    {"proxy-first-byte-timeout", required_argument, NULL, 'B'},
    {"metrics-listen", required_argument, NULL, 'm'},
    {"listen", required_argument, NULL, 'L'},
    {"cert", required_argument, NULL, 'C'},
    {"key", required_argument, NULL, 'K'},
    {"allow", required_argument, NULL, 'A'},
    {"handshake-timeout", required_argument, NULL, 'H'},
    {"local-auth", no_argument, NULL, 'a'},
    {"init-password", no_argument, NULL, 'P'},
    {"no-synack-log", no_argument, NULL, 'S'},
    {"compile-timeout", required_argument, NULL, 'T'},
    {"nfq-flows", required_argument, NULL, 'F'},
    {"events-keep", required_argument, NULL, 'E'},
    {"history-keep", required_argument, NULL, 1240}, /* issue 14: numbered apart */
    {"web-listen", required_argument, NULL, 1400},   /* issue 18 */
    {"web-max-conns", required_argument, NULL, 2410}, /* issue 24 */
    {"web-max-per-src", required_argument, NULL, 2411},
    /* issue 16, numbered in its range */
    {"nfq-script-flows", required_argument, NULL, 1380},
    {"udp-idle", required_argument, NULL, 2700}, /* issue 27 */
    {"captures-keep", required_argument, NULL, 'k'},
    /* issue 25, numbered in its range */
    {"user", required_argument, NULL, 1500},
    {"script-uid", required_argument, NULL, 1501},
    {"script-memory", required_argument, NULL, 1502},
    /* issue 28, numbered in its range */
    {"game-flag", required_argument, NULL, 2800},
    {"game-checker", required_argument, NULL, 2801},
    {"game-team", required_argument, NULL, 2802},
    {"config", required_argument, NULL, 'c'},
    {"version", no_argument, NULL, 'V'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int parse_opts(int argc, char **argv, struct opts *o)
{
    enum fgx_log_level level;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int c;

    *o = (struct opts){.state_dir = "/var/lib/fgex",
                       .run_dir = "/run/fgex",
                       .log_level = "info",
                       .threads = ncpu > 0 ? (unsigned)ncpu : 1,
                       .queue_base = FGX_QUEUE_BASE_DEFAULT,
                       .events_keep = CTL_EVENTS_KEEP,
                       .history_keep = CTL_HISTORY_KEEP,
                       .captures_keep = CTL_CAPTURES_KEEP,
                       .proxy_port = PROXY_PORT_DEFAULT,
                       .compile_timeout = CTL_COMPILE_TIMEOUT_DEFAULT,
                       .handshake_s = CTL_AUTH_HANDSHAKE_S_DEFAULT,
                       .web_max_conns = CTL_WEB_MAX_CONNS,
                       .web_max_per_src = CTL_WEB_MAX_PER_SRC,
                       .user = FGX_PRIV_USER_DEFAULT,
                       .script_uid = CTL_PRIV_SCRIPT_UID_DEFAULT,
                       .script_mem_mib = CTL_PRIV_SCRIPT_MEM_MIB_DEFAULT};
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            o->state_dir = optarg;
            break;
        case 'r':
            o->run_dir = optarg;
            break;
        case 't':
            if (parse_uint(optarg, 1, 256, &o->threads) < 0) {
                fprintf(stderr, "controld: --threads takes 1..256, not \"%s\"\n", optarg);
                return -EINVAL;
            }
            break;
        case 'f':
            o->foreground = true;
            break;
        case 'l':
            if (fgx_log_level_parse(optarg, &level) < 0) {
                fprintf(stderr, "controld: unknown log level \"%s\"\n", optarg);
                return -EINVAL;
            }
            o->log_level = optarg;
            break;
        case 'q':
            if (parse_uint(optarg, 0, 65000, &o->queue_base) < 0) {
                fprintf(stderr, "controld: --queue-base takes 0..65000, not \"%s\"\n", optarg);
                return -EINVAL;
            }
            break;
        case 'm':
            o->metrics_listen = optarg;
            break;
        case 'p':
            if (parse_uint(optarg, 1, 65535, &o->proxy_port) < 0) {
                fprintf(stderr, "controld: --proxy-port takes 1..65535, not \"%s\"\n", optarg);
                return -EINVAL;
            }
            break;
        case 'S':
            o->no_synack_log = true;
            break;
        case 1500:
            o->user = optarg;
            break;
        case 1501:
            if (parse_uint(optarg, 1000, 4294967000u, &o->script_uid) < 0) {
                fprintf(stderr, "controld: --script-uid takes 1000..4294967000, not \"%s\"\n",
                        optarg);
                return -EINVAL;
            }
            break;
        case 1502:
            if (parse_uint(optarg, 64, 1u << 20, &o->script_mem_mib) < 0) {
                fprintf(stderr, "controld: --script-memory takes 64..1048576 MiB, not \"%s\"\n",
                        optarg);
                return -EINVAL;
            }
            break;
        case 'H':
            if (parse_uint(optarg, 1, 3600, &o->handshake_s) < 0) {
                fprintf(stderr, "controld: --handshake-timeout takes 1..3600 seconds, not \"%s\"\n",
                        optarg);
                return -EINVAL;
            }
            break;
        case 'T':
            if (parse_uint(optarg, 1, CTL_COMPILE_TIMEOUT_MAX, &o->compile_timeout) < 0) {
                fprintf(stderr, "controld: --compile-timeout takes 1..%u seconds, not \"%s\"\n",
                        CTL_COMPILE_TIMEOUT_MAX, optarg);
                return -EINVAL;
            }
            break;
        case 'F':
            if (parse_uint(optarg, 16, 1u << 24, &o->nfq_flows) < 0) {
                fprintf(stderr, "controld: --nfq-flows takes 16..16777216, not \"%s\"\n", optarg);
                return -EINVAL;
            }
            break;
        case 1380:
            if (parse_uint(optarg, 16, 1u << 20, &o->nfq_script_flows) < 0) {
                fprintf(stderr, "controld: --nfq-script-flows takes 16..1048576, not \"%s\"\n",
                        optarg);
                return -EINVAL;
            }
            break;
        case 2700:
            if (parse_uint(optarg, 1, 3600, &o->udp_idle) < 0) {
                fprintf(stderr, "controld: --udp-idle takes 1..3600 seconds, not \"%s\"\n",
                        optarg);
                return -EINVAL;
            }
            break;
        case 1240:
            if (parse_uint(optarg, 1, CTL_HISTORY_KEEP_MAX, &o->history_keep) < 0) {
                fprintf(stderr, "controld: --history-keep takes 1..%u, not \"%s\"\n",
                        (unsigned)CTL_HISTORY_KEEP_MAX, optarg);
                return -EINVAL;
            }
            break;
        case 'E':
            if (parse_uint(optarg, 1, CTL_EVENTS_KEEP_MAX, &o->events_keep) < 0) {
                fprintf(stderr, "controld: --events-keep takes 1..%u, not \"%s\"\n",
                        (unsigned)CTL_EVENTS_KEEP_MAX, optarg);
                return -EINVAL;
            }
            break;
        case 'k':
            if (parse_uint(optarg, 0, CTL_CAPTURES_KEEP_MAX, &o->captures_keep) < 0) {
                fprintf(stderr, "controld: --captures-keep takes 0..%u, not \"%s\"\n",
                        (unsigned)CTL_CAPTURES_KEEP_MAX, optarg);
                return -EINVAL;
            }
            break;
        case 'M':
            if (parse_uint(optarg, 1, 1000000, &o->proxy_max_conns) < 0) {
                fprintf(stderr, "controld: --proxy-max-conns takes 1..1000000, not \"%s\"\n",
                        optarg);
                return -EINVAL;
            }
            break;
        case 'N':
            if (parse_uint(optarg, 0, 1000000, &o->proxy_per_src) < 0) {
                fprintf(stderr,
                        "controld: --proxy-max-conns-per-src takes 0..1000000, not \"%s\"\n",
                        optarg);
                return -EINVAL;
            }
            o->has_proxy_per_src = true;
            break;
        case 'B':
            if (parse_uint(optarg, 0, 86400, &o->proxy_first_byte) < 0) {
                fprintf(stderr,
                        "controld: --proxy-first-byte-timeout takes 0..86400 seconds, not "
                        "\"%s\"\n",
                        optarg);
                return -EINVAL;
            }
            o->has_proxy_first_byte = true;
            break;
        case 'L':
            if (strncmp(optarg, "tls+tcp://", 10) != 0) {
                fprintf(stderr,
                        "controld: --listen takes tls+tcp://ADDR:PORT (plain TCP is never "
                        "offered), not \"%s\"\n",
                        optarg);
                return -EINVAL;
            }
            o->listen = optarg;
            break;
        case 1400:
            o->web_listen = optarg;
            break;
        case 2410:
            if (parse_uint(optarg, 64, 1000000, &o->web_max_conns) < 0) {
                fprintf(stderr, "controld: --web-max-conns takes 64..1000000, not \"%s\"\n",
                        optarg);
                return -EINVAL;
            }
            break;
        case 2411:
            if (parse_uint(optarg, 1, 1000000, &o->web_max_per_src) < 0) {
                fprintf(stderr, "controld: --web-max-per-src takes 1..1000000, not \"%s\"\n",
                        optarg);
                return -EINVAL;
            }
            break;
        case 'C':
            o->cert = optarg;
            break;
        case 'K':
            o->key = optarg;
            break;
        case 'A': {
            struct fgx_cidr cidr;

            if (fgx_cidr_parse(optarg, &cidr) < 0 || cidr.family == 0) {
                fprintf(stderr, "controld: --allow takes an address or prefix, not \"%s\"\n",
                        optarg);
                return -EINVAL;
            }
            if (o->nallow == CTL_AUTH_ALLOW_MAX) {
                fprintf(stderr, "controld: at most %d --allow\n", CTL_AUTH_ALLOW_MAX);
                return -EINVAL;
            }
            o->allow[o->nallow++] = optarg;
            break;
        }
        case 2800:
            o->game_flag = optarg;
            break;
        case 2801:
        case 2802: {
            int k = c - 2801;

            if (o->ngame_addrs[k] == CTL_GAME_ADDRS_MAX) {
                fprintf(stderr, "controld: at most %d --game-%s\n", CTL_GAME_ADDRS_MAX,
                        k ? "team" : "checker");
                return -EINVAL;
            }
            o->game_addrs[k][o->ngame_addrs[k]++] = optarg;
            break;
        }
        case 'a':
            o->local_auth = true;
            break;
        case 'P':
            o->init_password = true;
            break;
        case 'c': /* read by ctl_conffile_load() already */
            break;
        case 'V':
            (void)printf("controld %s\n", FGX_VERSION);
            exit(0);
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -EINVAL;
        }
    }
    if (!o->cert != !o->key) {
        fprintf(stderr, "controld: --cert and --key go together\n");
        return -EINVAL;
    }
    if ((o->cert || o->nallow) && !o->listen && !o->web_listen) {
        fprintf(stderr, "controld: --cert, --key and --allow need --listen or --web-listen\n");
        return -EINVAL;
    }
    if (!o->game_flag && (o->ngame_addrs[0] || o->ngame_addrs[1])) {
        fprintf(stderr, "controld: --game-checker and --game-team need --game-flag\n");
        return -EINVAL;
    }
    if (optind < argc) {
        fprintf(stderr, "controld: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return -EINVAL;
    }
    return 0;
}

/* --game-*: checked as `game set` checks them, stored in place of the stored game. */
static int game_apply(const struct opts *o, struct ctl_store *store)
{
    struct ctl_game g;
    struct ctl_txn *t;
    char err[768];
    int rv = ctl_game_parse((const uint8_t *)o->game_flag, strlen(o->game_flag),
                            o->game_addrs[0], o->ngame_addrs[0], o->game_addrs[1],
                            o->ngame_addrs[1], &g, err, sizeof(err));

    if (rv < 0) {
        fgx_err("--game-flag: %s", err);
        return rv;
    }
    g.set_time = (uint64_t)time(NULL);
    rv = ctl_txn_begin(store, true, &t);
    if (rv == 0) {
        rv = ctl_game_save(t, &g);
        if (rv == 0)
            rv = ctl_txn_commit(t);
        else
            ctl_txn_abort(t);
    }
    if (rv < 0)
        fgx_err("cannot store the game of --game-flag: %s", ctl_store_strerror(rv));
    else
        fgx_info("game set from the options: a flag format of %zu bytes, %zu checker and %zu "
                 "team addresses", g.flag_len, g.nchecker, g.nteam);
    ctl_game_release(&g);
    return rv;
}

static int mkdir_p(const char *dir, mode_t mode)
{
    char path[4096];

    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, mode) == -1 && errno != EEXIST) {
            int rv = -errno;
            fprintf(stderr, "controld: cannot create %s: %s\n", path, strerror(errno));
            return rv;
        }
        *p = c;
        if (c == '\0')
            return 0;
    }
}

/* Take the run directory's pid-file lock; a second controld on the same run dir is refused
 * here, before it touches a socket. The lock lives as long as the open file description, which
 * the daemon inherits across its forks. */
static int pidfile_lock(const char *run_dir, int *fd_out)
{
    char path[4096], buf[32] = "";
    int fd;

    snprintf(path, sizeof(path), "%s/controld.pid", run_dir);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd == -1) {
        int rv = -errno;
        fprintf(stderr, "controld: cannot open %s: %s\n", path, strerror(errno));
        return rv;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == -1) {
        int rv = errno == EWOULDBLOCK ? -EEXIST : -errno;
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        if (n > 0)
            buf[n] = '\0';
        buf[strcspn(buf, "\n")] = '\0';
        if (rv == -EEXIST)
            fprintf(stderr, "controld: already running (pid %s) with run dir %s; stop it first\n",
                    buf[0] ? buf : "?", run_dir);
        else
            fprintf(stderr, "controld: cannot lock %s: %s\n", path, strerror(-rv));
        close(fd);
        return rv;
    }
    *fd_out = fd;
    return 0;
}

static int pidfile_write(int fd)
{
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());

    if (ftruncate(fd, 0) == -1 || pwrite(fd, buf, (size_t)n, 0) != n) {
        fgx_err("cannot write the pid file: %s", strerror(errno));
        return -errno;
    }
    return 0;
}

/* Double fork. The original process returns only in the daemon (with *ready_fd to write to
 * once serving); the parent waits for that byte and exits 0, or 1 if the daemon died first. */
static int daemonize(const char *run_dir, int *ready_fd)
{
    char logpath[4096];
    int p[2], fd;
    pid_t pid;

    if (pipe2(p, O_CLOEXEC) == -1) {
        perror("controld: pipe");
        return -errno;
    }
    pid = fork();
    if (pid == -1) {
        perror("controld: fork");
        return -errno;
    }
    if (pid > 0) {
        char c;
        ssize_t n;

        close(p[1]);
        do
            n = read(p[0], &c, 1);
        while (n == -1 && errno == EINTR);
        if (n == 1)
            exit(0);
        fprintf(stderr, "controld: failed to start; see %s/controld.log\n", run_dir);
        exit(1);
    }
    close(p[0]);
    if (setsid() == -1)
        _exit(1);
    pid = fork();
    if (pid == -1)
        _exit(1);
    if (pid > 0)
        _exit(0);
    if (chdir("/") == -1)
        _exit(1);
    snprintf(logpath, sizeof(logpath), "%s/controld.log", run_dir);
    fd = open("/dev/null", O_RDWR);
    if (fd != -1) {
        dup2(fd, STDIN_FILENO);
        dup2(fd, STDOUT_FILENO);
        close(fd);
    }
    fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0640);
    if (fd != -1) {
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    *ready_fd = p[1];
    return 0;
}

/* The first line of stdin, before daemonizing takes stdin away. */
static int read_password(char *buf, size_t len)
{
    if (!fgets(buf, (int)len, stdin)) {
        fprintf(stderr, "controld: --init-password: no password on stdin\n");
        return -EINVAL;
    }
    buf[strcspn(buf, "\r\n")] = '\0';
    return 0;
}

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The one change request whose regexes compile (ctl_compile.h) while the loop goes on. */
struct pending {
    struct fgx_chan_req *req; /* NULL: none */
    void *buf;
    size_t len;
    struct fgx_peer peer;
    unsigned rounds;
};

static void reply_send(struct fgx_chan *ctl, struct fgx_chan_req *req, void *reply, size_t rlen)
{
    int rv = fgx_chan_reply(ctl, req, reply ? reply : "", reply ? rlen : 0, 1000);

    if (rv < 0)
        fgx_warn("cannot send a reply to fgexctl: %s", strerror(-rv));
    free(reply);
}

static void reply_error(struct fgx_chan *ctl, struct fgx_chan_req *req, Fgx__Ctl__Code code,
                        const char *msg)
{
    void *reply = NULL;
    size_t rlen = 0;

    if (ctl_rpc_error_reply(code, msg, &reply, &rlen) < 0)
        fgx_err("cannot build a reply: %s", strerror(ENOMEM));
    reply_send(ctl, req, reply, rlen);
}

static void pending_end(struct pending *p)
{
    free(p->buf);
    memset(p, 0, sizeof(*p));
    ctl_compile_reset();
}

/* Run (or run again) a request; a change that needs the compiler becomes *p. req and buf are
 * consumed. */
static void serve_one(struct ctl_ctx *ctx, struct fgx_chan *ctl, struct pending *p,
                      struct fgx_chan_req *req, const struct fgx_peer *peer, void *buf, size_t len)
{
    bool again = p->req == req, deferred = false;
    void *reply = NULL;
    size_t rlen = 0;
    int rv;

    rv = ctl_rpc_handle_try(ctx, peer, buf, len, p->req != NULL && !again, &reply, &rlen,
                            &deferred);
    if (rv < 0) {
        fgx_err("cannot build a reply: %s", strerror(-rv));
    } else if (deferred) {
        if (again && p->rounds >= COMPILE_ROUNDS_MAX) {
            reply_error(ctl, req, FGX__CTL__CODE__CODE_ERROR,
                        "the configuration kept changing while this change compiled; nothing "
                        "was changed, try again");
            pending_end(p);
            return;
        }
        rv = ctl_compile_start();
        if (rv < 0) {
            reply_error(ctl, req, FGX__CTL__CODE__CODE_ERROR,
                        "cannot start the regex compiler (see controld's log); nothing was "
                        "changed");
            if (again)
                pending_end(p);
            else
                free(buf);
            ctl_compile_reset();
            return;
        }
        if (!again)
            *p = (struct pending){.req = req, .buf = buf, .len = len, .peer = *peer};
        p->rounds++;
        return;
    }
    reply_send(ctl, req, reply, rlen);
    if (again)
        pending_end(p);
    else
        free(buf);
}

/* The pending change's compile: refused when it failed, run again when it is done. */
static void pending_poll(struct ctl_ctx *ctx, struct fgx_chan *ctl, struct pending *p)
{
    char err[512];
    bool done = false;
    int rv;

    if (!p->req)
        return;
    rv = ctl_compile_poll(&done, err, sizeof(err));
    if (!done)
        return;
    if (rv < 0) {
        reply_error(ctl, p->req,
                    rv == -ETIMEDOUT ? FGX__CTL__CODE__CODE_INVALID : FGX__CTL__CODE__CODE_ERROR,
                    err);
        pending_end(p);
        return;
    }
    serve_one(ctx, ctl, p, p->req, &p->peer, p->buf, p->len);
}

/* The last write at a stop: on a full disk, the reserve beside the store (ctl_store.h) is given
 * up so that the events and counters still in memory fit; what does not fit is counted. */
static int stop_flush(struct ctl_stats *stats, struct ctl_store *store)
{
    size_t unsaved = ctl_stats_events_unsaved(stats);
    int rv = ctl_stats_flush(stats, store, now_ms(), true);

    if ((rv == -ENOSPC || rv == -EDQUOT) && ctl_store_reserve_release(store))
        rv = ctl_stats_flush(stats, store, now_ms(), true);
    if (rv == -ENOSPC || rv == -EDQUOT || rv == -EFBIG) {
        /* still no room: the events before the blocked connections' captures */
        size_t ncaps = ctl_stats_captures_drop(stats);

        if (ncaps > 0) {
            ctl_health_note(0, CTL_HEALTH_ERROR, "captures-lost", ncaps,
                            "controld stopped on a full store: %zu blocked connections' captures "
                            "were not written, to make room for their events",
                            ncaps);
            rv = ctl_stats_flush(stats, store, now_ms(), true);
        }
    }
    if (rv == 0) {
        if (unsaved > 0)
            fgx_info("%zu events that waited in memory were written at the stop", unsaved);
        return 0;
    }
    ctl_health_note(0, CTL_HEALTH_ERROR, "events-lost", ctl_stats_events_unsaved(stats),
                    "controld stopped with %zu events it could not write (%s): they are lost",
                    ctl_stats_events_unsaved(stats), ctl_store_strerror(rv));
    return rv;
}

static void run_loop(struct ctl_ctx *ctx, struct ctl_sup *sup, struct fgx_chan *ctl,
                     struct ctl_metrics *metrics, struct ctl_web *web)
{
    uint64_t next_stats = now_ms() + STATS_PERIOD_MS, next_retry = now_ms() + RETRY_PERIOD_MS;
    struct pending pend = {0};

    while (!stop_requested) {
        void *req = NULL;
        size_t len = 0;
        bool respawned = false;
        struct fgx_peer peer;
        struct fgx_chan_req *slot = NULL;
        int rv;

        /* the loop turned: a stall the watch reported is over (ctl_loopwatch.h) */
        ctl_loopwatch_turn(now_ms());
        ctl_loopwatch_step("waiting for a request");
        rv = fgx_chan_recv_req(ctl, &req, &len, pend.req ? LOOP_COMPILE_MS : LOOP_RECV_MS, &peer,
                               &slot);
        if (rv == 0) {
            ctl_loopwatch_step("a request");
            serve_one(ctx, ctl, &pend, slot, &peer, req, len);
        } else if (rv != -ETIMEDOUT) {
            fgx_warn("control channel: %s", strerror(-rv));
            usleep(LOOP_RECV_MS * 1000);
        }
        ctl_loopwatch_step("the pending change");
        pending_poll(ctx, ctl, &pend);
        /* The health log's new entries, in the turn they were noted (as events are). */
        ctl_loopwatch_step("saving the health log");
        ctl_health_save(ctx->store, now_ms(), false);
        /* The web page's live messages: queued for its server's thread, never waited on. */
        ctl_loopwatch_step("the web page's messages");
        ctl_web_tick(web, ctx);
        ctl_loopwatch_step("the firewall's confirm deadline");
        ctl_fw_tick(ctx->fw, ctx->store);
        /* fgex's tables removed by another program come back within a turn or two */
        ctl_loopwatch_step("the nftables watch");
        ctl_nftwatch_tick(ctx->watch, ctx->store, now_ms());
        ctl_loopwatch_step("the workers' supervision");
        ctl_script_sup_poll();
        ctl_sup_poll(sup, &respawned);
        if (ctx->px_sup) {
            bool px_respawned = false;

            ctl_sup_poll(ctx->px_sup, &px_respawned);
            respawned |= px_respawned;
        }
        ctl_loopwatch_step("the ruleset push to a restarted worker");
        if (respawned && ctl_apply_full(ctx, CTL_PUSH_TIMEOUT_MS) < 0)
            fgx_warn("the restarted nfqworker did not take the ruleset yet");
        /* a worker down: its services' logs say whether their traffic passes or stops */
        ctl_loopwatch_step("the services' gaps");
        ctl_health_gap_poll(ctx, now_ms());
        if (ctx->worker_stale && now_ms() >= next_retry) {
            /* A worker that missed a generation would filter by an old set: resend it all. */
            ctl_loopwatch_step("resending the ruleset to a worker that missed it");
            if (ctl_apply_full(ctx, RETRY_TIMEOUT_MS) == 0)
                fgx_info("the nfqworker confirmed the current ruleset");
            next_retry = now_ms() + RETRY_PERIOD_MS;
        }
        if (now_ms() >= next_stats) {
            ctl_loopwatch_step("the workers' statistics");
            ctl_stats_refresh(ctx, STATS_TIMEOUT_MS);
            /* Counters are due every few seconds even while no worker answers. */
            ctl_stats_flush(ctx->stats, ctx->store, now_ms(), false);
            if (metrics)
                ctl_metrics_update(metrics, ctx);
            next_stats =
                now_ms() + (ctx->stats && ctl_stats_events_burst(ctx->stats) ? STATS_BURST_MS
                                                                             : STATS_PERIOD_MS);
        }
    }
    if (pend.req) {
        reply_error(ctl, pend.req, FGX__CTL__CODE__CODE_ERROR,
                    "controld is stopping: the change was not made");
        pending_end(&pend);
    }
}

int main(int argc, char **argv)
{
    struct ctl_ctx ctx = {0};
    struct ctl_nft *nft = NULL;
    struct ctl_fw *fw = NULL;
    struct ctl_nftwatch *watch = NULL;
    struct ctl_fw_guard guard;
    struct ctl_sup *sup = NULL, *px_sup = NULL;
    struct ctl_stats *stats = NULL;
    struct ctl_metrics *metrics = NULL;
    struct ctl_web *web = NULL;
    struct fgx_chan *ctl = NULL;
    struct ctl_auth *auth = NULL;
    struct ctl_tls tls = {0};
    char password[CTL_AUTH_PASSWORD_MAX + 2] = "";
    struct opts o;
    enum fgx_log_level level;
    struct sigaction sa;
    /* static: o points into it for controld's whole life, through every early return. */
    static struct ctl_conffile conf;
    char url[4200], cerr[4400];
    int pidfd = -1, ready_fd = -1, rv, status = 1;

    rv = ctl_conffile_load(longopts, argc, argv, CTL_CONFFILE_DEFAULT, &conf, cerr, sizeof(cerr));
    if (rv < 0) {
        (void)fprintf(stderr, "controld: %s\n", cerr);
        return 2;
    }
    /* o points into conf.argv: conf lives as long as controld. */
    if (parse_opts(conf.argc, conf.argv, &o) < 0) {
        if (ctl_conffile_origin(&conf, optind - 1, cerr, sizeof(cerr)))
            (void)fprintf(stderr, "controld: (from %s)\n", cerr);
        ctl_conffile_release(&conf);
        return 2;
    }
    fgx_log_level_parse(o.log_level, &level);
    fgx_log_init("controld", level);
    ctl_compile_config(o.compile_timeout, 0);
    if (mkdir_p(o.run_dir, 0755) < 0 || pidfile_lock(o.run_dir, &pidfd) < 0)
        return 1;
    if (o.init_password && read_password(password, sizeof(password)) < 0)
        return 1;
    if (o.listen || o.web_listen) {
        /* Before daemonizing, so that the fingerprint reaches the terminal that started us. */
        if (mkdir_p(o.state_dir, 0700) < 0 || ctl_tls_load(o.state_dir, o.cert, o.key, &tls) < 0)
            return 1;
        printf("controld: TLS certificate SHA-256 fingerprint %s\n", tls.fingerprint);
        fflush(stdout);
    }
    if (!o.foreground && daemonize(o.run_dir, &ready_fd) < 0)
        return 1;
    if (pidfile_write(pidfd) < 0)
        goto out;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);

    rv = ctl_store_open(o.state_dir, 0, &ctx.store);
    if (rv < 0)
        goto out;
    /* an unreadable log is said and starts empty: no reason not to filter */
    (void)ctl_health_load(ctx.store);
    ctl_health_note(0, CTL_HEALTH_INFO, "controld-started", 0, "controld %s started",
                    FGX_VERSION);
    /* room for the events in memory at a stop on a full disk */
    ctl_store_reserve_start(ctx.store);
    rv = ctl_auth_new(&auth);
    for (size_t i = 0; rv == 0 && i < o.nallow; i++)
        rv = ctl_auth_allow_add(auth, o.allow[i]);
    if (rv == 0)
        rv = ctl_auth_load(auth, ctx.store);
    if (rv < 0)
        goto out;
    ctl_auth_local_set(auth, o.local_auth);
    ctl_auth_fingerprint_set(auth, tls.fingerprint);
    if (o.init_password) {
        char err[256];

        rv = ctl_auth_password_save(auth, ctx.store, password, err, sizeof(err));
        explicit_bzero(password, sizeof(password));
        if (rv < 0) {
            fgx_err("--init-password: %s", err);
            goto out;
        }
        fgx_info("password set from stdin");
    }
    ctx.auth = auth;
    rv = ctl_stats_open_keep(ctx.store, o.events_keep, &stats);
    if (rv < 0)
        goto out;
    ctl_stats_captures_keep(stats, o.captures_keep);
    ctx.stats = stats;
    rv = ctl_script_rt_load(ctx.store);
    if (rv < 0) {
        fgx_err("cannot read the script counters: %s", strerror(-rv));
        goto out;
    }
    ctx.history_keep = o.history_keep;
    if (o.game_flag) {
        rv = game_apply(&o, ctx.store);
        if (rv < 0)
            goto out;
    }
    {
        /* the statistics tell the checker's flag reads from stolen flags */
        struct ctl_game g;
        struct ctl_txn *gt;

        if (ctl_txn_begin(ctx.store, false, &gt) == 0) {
            if (ctl_game_load(gt, &g) == 0)
                ctl_stats_game_set(stats, &g);
            ctl_txn_abort(gt);
            ctl_game_release(&g);
        }
    }
    if (o.listen || o.web_listen) {
        /* Each connection a listener holds is a descriptor: a flood of idle ones must meet
         * the listeners' own limits, not the process's (1024 by default under systemd). */
        unsigned long nofile = ctl_listen_raise_nofile();
        unsigned long need = 512ul + (o.listen ? CTL_AUTH_PENDING_MAX + 64 : 0);

        if (o.web_listen && nofile < need + o.web_max_conns + CTL_WEB_CONN_SLACK + 16) {
            unsigned long fit = nofile > need + 64 + CTL_WEB_CONN_SLACK + 16
                                    ? nofile - need - CTL_WEB_CONN_SLACK - 16
                                    : 64;

            fgx_warn("--web-max-conns %u does not fit the open-files limit %lu: %lu instead",
                     o.web_max_conns, nofile, fit);
            o.web_max_conns = (unsigned)fit;
        }
    }
    if (o.metrics_listen || o.web_listen) {
        /* the snapshot; its own listener only with --metrics-listen */
        rv = ctl_metrics_start(o.metrics_listen, &metrics);
        if (rv < 0)
            goto out;
    }
    rv = ctl_nft_open(&(struct ctl_nft_config){.queue_base = o.queue_base,
                                               .nthreads = o.threads,
                                               .no_synack_log = o.no_synack_log},
                      &nft);
    if (rv < 0) {
        fgx_err("cannot open nftables: %s", strerror(-rv));
        goto out;
    }
    /* The firewall's table: its own socket, so it is replaced apart from the services'. */
    rv = ctl_fw_guard_init(&guard, o.listen, o.allow, o.nallow);
    if (rv == 0)
        rv = ctl_fw_guard_web(&guard, o.web_listen);
    if (rv == 0)
        rv = ctl_fw_new(NULL, &guard, &fw);
    if (rv == 0)
        rv = ctl_fw_set_run_dir(fw, o.run_dir);
    if (rv < 0) {
        fgx_err("cannot set up the firewall: %s", strerror(-rv));
        goto out;
    }
    /* The workers' user, before the first worker (ctl_priv.h). */
    rv = ctl_priv_init(&(struct ctl_priv){.user = o.user,
                                          .script_uid = o.script_uid,
                                          .script_mem_mib = o.script_mem_mib,
                                          .state_dir = o.state_dir,
                                          .run_dir = o.run_dir});
    if (rv < 0)
        goto out;
    /* The script worker first (ctl_script_sup.h): both workers are given its URL and dial it. */
    rv = ctl_script_sup_start(o.run_dir, o.log_level);
    if (rv < 0)
        goto out;
    rv = ctl_sup_start(&(struct ctl_sup_config){.run_dir = o.run_dir,
                                                .log_level = o.log_level,
                                                .threads = o.threads,
                                                .queue_base = o.queue_base,
                                                .no_synack_log = !ctl_nft_synack_log(nft),
                                                .nfq_flows = o.nfq_flows,
                                                .nfq_script_flows = o.nfq_script_flows,
                                                .udp_idle_s = o.udp_idle},
                       &sup);
    if (rv < 0)
        goto out;
    /* The proxy layer's worker runs always, so a service can move to it at any time. */
    rv = ctl_sup_start(&(struct ctl_sup_config){.run_dir = o.run_dir,
                                                .log_level = o.log_level,
                                                .threads = o.threads,
                                                .proxy_port = o.proxy_port,
                                                .max_conns = o.proxy_max_conns,
                                                .has_max_per_src = o.has_proxy_per_src,
                                                .max_per_src = o.proxy_per_src,
                                                .has_first_byte = o.has_proxy_first_byte,
                                                .first_byte_s = o.proxy_first_byte,
                                                .udp_idle_s = o.udp_idle},
                       &px_sup);
    if (rv < 0)
        goto out;
    ctx.nft = nft;
    ctx.fw = fw;
    ctx.sup = sup;
    ctx.px_sup = px_sup;
    ctx.px_port = (uint16_t)o.proxy_port;
    ctx.started = (uint64_t)time(NULL);
    ctx.threads = o.threads;
    snprintf(url, sizeof(url), "ipc://%s/control.sock", o.run_dir);
    rv = fgx_chan_listen(url, FGX_CHAN_REP, &ctl);
    if (rv < 0)
        goto out;
    if (o.listen) {
        rv = fgx_chan_listen_tls(ctl, o.listen, tls.cert_pem, tls.key_pem, ctl_auth_admit, auth);
        if (rv == 0)
            rv = fgx_chan_tls_guard(ctl, &(struct fgx_chan_guard_config){
                                             .handshake_ms = (int)o.handshake_s * 1000,
                                             .per_peer = CTL_AUTH_PENDING_PER_PEER,
                                             .max = CTL_AUTH_PENDING_MAX,
                                             .cut = ctl_listen_control_cut,
                                             .gauge = ctl_listen_control_gauge});
        if (rv == 0)
            ctl_listen_limits(CTL_LISTENER_CONTROL, CTL_AUTH_PENDING_MAX,
                              CTL_AUTH_PENDING_PER_PEER, o.handshake_s);
        if (rv < 0)
            goto out;
        fgx_info("listening on %s, certificate SHA-256 fingerprint %s%s", o.listen, tls.fingerprint,
                 o.nallow ? "" : " (no --allow: any address may connect)");
        if (!ctl_auth_enabled(auth))
            fgx_warn("the password requirement is off: anyone who reaches %s controls the "
                     "firewall (fgexctl auth on)",
                     o.listen);
        else if (!ctl_auth_has_password(auth))
            fgx_warn("no password is set: remote clients cannot log in until one is (fgexctl "
                     "passwd on this host)");
    }
    if (o.web_listen) {
        /* The page's requests come into the loop through the relay, as its browser's own. */
        rv = fgx_chan_listen_relay(ctl, CTL_WEB_RELAY_URL);
        if (rv == 0)
            rv = ctl_web_start(&(struct ctl_web_config){.listen = o.web_listen,
                                                        .cert_pem = tls.cert_pem,
                                                        .key_pem = tls.key_pem,
                                                        .auth = auth,
                                                        .metrics = metrics,
                                                        .relay_url = CTL_WEB_RELAY_URL,
                                                        .max_conns = o.web_max_conns,
                                                        .max_per_src = o.web_max_per_src,
                                                        .handshake_s = o.handshake_s},
                               &web);
        if (rv < 0)
            goto out;
        fgx_info("web dashboard on https://%s/ (port %u), certificate SHA-256 fingerprint %s%s",
                 o.web_listen, ctl_web_port(web), tls.fingerprint,
                 o.nallow ? "" : " (no --allow: any address may connect)");
        if (!ctl_auth_has_password(auth))
            fgx_warn("no password is set: nobody can log in to the web dashboard until one is "
                     "(fgexctl passwd on this host)");
    }
    /* Worker first, rules second: a restarted controld filters again before anyone asks. */
    if (ctl_apply_full(&ctx, CTL_PUSH_TIMEOUT_MS) < 0)
        fgx_warn("the nfqworker has not confirmed the ruleset yet; it will get it when it is up");
    if (ctl_fw_start(fw, ctx.store) < 0)
        fgx_warn("the firewall rules are not in place (see above)");
    /* From now on a table someone else removes is put back (ctl_nftwatch.h). */
    if (ctl_nftwatch_open(nft, fw, &watch) < 0)
        ctl_health_note(0, CTL_HEALTH_ERROR, "rules-unwatched", 0,
                        "controld cannot watch its nftables tables: if another program removes "
                        "them, traffic passes unfiltered until controld restarts");
    ctx.watch = watch;
    fgx_info("controld %s listening on %s (queues from %u, %u threads, %s queue)", CTL_VERSION, url,
             o.queue_base, o.threads, ctl_nft_native_queue(nft) ? "native" : "compat");
    if (ready_fd != -1) {
        char c = 1;
        if (write(ready_fd, &c, 1) != 1)
            fgx_warn("cannot tell the parent process that controld is up");
        close(ready_fd);
        ready_fd = -1;
    }
    if (metrics)
        ctl_metrics_update(metrics, &ctx);
    /* From here on a blocked loop is said, and requests meanwhile answered (ctl_loopwatch.h). */
    (void)ctl_loopwatch_start(ctl);
    run_loop(&ctx, sup, ctl, metrics, web);
    ctl_loopwatch_stop();
    fgx_info("stopping");
    status = 0;
out:
    explicit_bzero(password, sizeof(password));
    /* The web server first (it relays into the channel), then the channel: their admission
     * callbacks read auth. */
    ctl_web_stop(web);
    fgx_chan_close(ctl);
    /* controld's own removal of its rules below is not someone else's */
    ctl_nftwatch_free(watch);
    ctx.watch = NULL;
    ctl_auth_free(auth);
    ctl_tls_release(&tls);
    ctl_metrics_stop(metrics);
    /* The worker's counts since its last report, then everything to disk. */
    ctl_stats_refresh(&ctx, STATS_TIMEOUT_MS);
    if (stats && stop_flush(stats, ctx.store) < 0)
        status = 1;
    if (ctx.store) {
        ctl_health_note(0, CTL_HEALTH_INFO, "controld-stopped", 0, "controld stopped");
        if (ctl_health_save(ctx.store, now_ms(), true) < 0)
            status = 1;
    }
    /* Rules first: once nothing is queued, stopping the worker drops no packet in flight. */
    if (nft && ctl_nft_clear(nft) < 0)
        status = 1;
    /* its table stays in force while controld is stopped (ctl_fw_free()): the box stays
     * guarded; the services' table goes, each service failing open or closed by its setting */
    ctl_fw_free(fw);
    /* all three told at once: the stop takes the slowest worker's time, not the sum */
    ctl_sup_stop_begin(sup);
    ctl_sup_stop_begin(px_sup);
    ctl_script_sup_stop_begin();
    ctl_sup_stop(sup);
    ctl_sup_stop(px_sup);
    ctl_script_sup_stop();
    ctl_nft_close(nft);
    ctl_ctx_release(&ctx);
    ctl_stats_free(stats);
    ctl_store_close(ctx.store);
    if (pidfd != -1) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/controld.pid", o.run_dir);
        unlink(path);
        close(pidfd);
    }
    if (ready_fd != -1)
        close(ready_fd);
    ctl_conffile_release(&conf);
    return status;
}
