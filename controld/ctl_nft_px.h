/* nftables for the proxy layer (ctl_nft.c): the rules that divert each running proxy-layer
 * service's connections to proxyworker with tproxy, in the same fgex table and the same
 * transaction as the NFQUEUE layer's, so that switching a service between layers is atomic.
 *
 * Chains (see ctl_nft.c): pxpre (prerouting, mangle priority) tproxies new connections to
 * px_port and marks CTL_ROUTE_MARK everything bound for the proxy's transparent sockets;
 * pxout (output, type route) sends the box's own traffic to a service back through lo so it
 * meets the tproxy rule, and reroutes a local service's replies to the proxy's upstream
 * connections. The proxy's upstream sockets carry FGX_MARK exactly and are never diverted.
 *
 * fail_open: when no proxyworker listens, tproxy finds no socket and the packet goes on to the
 * service unfiltered (the kernel decides per packet, as NFQUEUE's bypass does); a fail-closed
 * service has a drop rule after its tproxy rule, so its new connections get nowhere. */
#ifndef CTL_NFT_PX_H
#define CTL_NFT_PX_H

#include <stddef.h>
#include <stdint.h>

#include "controld/ctl_nft.h"

/* Replace the fgex table with the rules of both layers in one transaction: nfq the running
 * nfqueue-layer services, px the running proxy-layer and external-layer ones (TCP or UDP) sent
 * to proxyworker's port px_port (external: to their own). Sets up the policy routing (ctl_route.c) when px is not empty
 * and removes it when it is. Both lists are copied; ctl_nft_sync() keeps the proxy list of the
 * last call, ctl_nft_clear() drops both. Returns 0 or a negative errno (the kernel's reason
 * logged). */
int ctl_nft_sync_layers(struct ctl_nft *n, const struct ctl_nft_service *nfq, size_t nnfq,
                        const struct ctl_nft_service *px, size_t npx, uint16_t px_port);

#endif
