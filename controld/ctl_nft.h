/* nftables for controld: the rules that put each running nfqueue-layer service's traffic into
 * the workers' queues. fgex owns its tables (inet family, named from config.table, default
 * "fgex") and never reads or changes anyone else's. Everything is built with libnftnl and sent
 * with libmnl as one batch, so each change is atomic. */
#ifndef CTL_NFT_H
#define CTL_NFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/addr.h"
#include "fgx/svcaddr.h"

struct ctl_nft_config {
    const char *table;   /* borrowed; default "fgex" when NULL */
    unsigned queue_base; /* fgx_queue_num() numbering, fgx/dp.h */
    unsigned nthreads;   /* worker threads: flows are spread by symhash mod nthreads */
    /* Nonzero: queue the server's SYN-ACK rather than copy it to the worker's NFLOG group, as
     * on a kernel without the log expression (probed either way). */
    int no_synack_log;
};

#define CTL_NFT_ADDRS_MAX 32

struct ctl_nft_service {
    uint32_t id;
    uint8_t ipproto; /* IPPROTO_TCP or IPPROTO_UDP */
    uint16_t port;
    struct fgx_cidr addr; /* family 0: both families, any address */
    bool fail_open;       /* queue with bypass, to the fail-open queue range */
    /* Every address with its port (naddrs 0: the one addr/port above). They live in the
     * service's sets (s<id>_4, s<id>_6, s<id>_if), so adding or removing one is a set element
     * in a batch, and no rule or chain changes. */
    struct fgx_svcaddr addrs[CTL_NFT_ADDRS_MAX];
    size_t naddrs;
    /* Proxy list only: the external layer, handed by tproxy to `to` (the team's own proxy)
     * rather than to proxyworker. */
    bool external;
    struct fgx_svcaddr to;
};

struct ctl_nft;

/* Open a netlink socket and detect whether the kernel has the native nftables queue expression
 * (CONFIG_NFT_QUEUE) or only the xtables NFQUEUE target through nft_compat. Does not create the
 * table yet. *out owned by the caller (ctl_nft_close()). */
int ctl_nft_open(const struct ctl_nft_config *cfg, struct ctl_nft **out);
/* true: native queue expression; false: compat NFQUEUE target. */
bool ctl_nft_native_queue(const struct ctl_nft *n);
/* true: the server's SYN-ACKs are copied to the worker's NFLOG groups; false: they are queued
 * (nfqworker --no-synack-log). */
bool ctl_nft_synack_log(const struct ctl_nft *n);

/* Replace the whole fgex table, in one transaction, with the rules for exactly these services
 * (the running nfqueue-layer ones). n == 0 removes the table. Returns 0 or a negative errno with
 * the kernel's reason logged. */
int ctl_nft_sync(struct ctl_nft *n, const struct ctl_nft_service *svcs, size_t nsvcs);

/* For the watch (ctl_nftwatch.c): the table's name, the port id its changes carry, whether
 * the table should exist now (services run on either layer) and whether the proxy layer's
 * policy routing should (proxy-layer services run). */
const char *ctl_nft_table(const struct ctl_nft *n);
uint32_t ctl_nft_portid(const struct ctl_nft *n);
bool ctl_nft_wanted(const struct ctl_nft *n);
bool ctl_nft_route_wanted(const struct ctl_nft *n);
/* Someone else changed or removed the table: write it whole again from the last lists applied,
 * in one transaction, and the policy routing when the proxy layer needs it. Returns 0 or a
 * negative errno (the kernel's reason logged). */
int ctl_nft_restore(struct ctl_nft *n);

/* Remove the fgex table if it exists. */
int ctl_nft_clear(struct ctl_nft *n);

/* Close the socket (the rules stay; call ctl_nft_clear() first to remove them). NULL: no-op. */
void ctl_nft_close(struct ctl_nft *n);

#endif
