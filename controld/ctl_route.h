/* Policy routing for the proxy layer: packets that controld's nftables rules mark
 * CTL_ROUTE_MARK (connections diverted by tproxy, replies bound for the proxy's transparent
 * sockets, traffic of the box itself rerouted to meet the tproxy rule) are routed by table
 * CTL_ROUTE_TABLE, whose only route is `local default dev lo`: they are delivered locally, to the
 * proxy, whatever their destination address. One rule and one route per family, added by
 * controld while proxy-layer services run and removed when none do. */
#ifndef CTL_ROUTE_H
#define CTL_ROUTE_H

#include <stdint.h>

#include "fgx/dp.h"

#define CTL_ROUTE_MARK (FGX_MARK | 1u) /* within fgex's mark space, never FGX_MARK itself */
#define CTL_ROUTE_TABLE 4066u
#define CTL_ROUTE_PREF 9066u /* the rule's priority, before the main table (32766) */

/* Add the rule and the route for IPv4 and IPv6; what exists already is kept. A host without
 * IPv6 gets the IPv4 half (logged). Returns 0 or a negative errno with the kernel's reason
 * logged. */
int ctl_route_setup(void);
/* The same, counting in *created the rules and routes that were missing (someone else removed
 * them: the watch, ctl_nftwatch.c, puts them back). */
int ctl_route_restore(unsigned *created);
/* Remove both; what is already gone is fine. Returns 0 or a negative errno. */
int ctl_route_teardown(void);

#endif
