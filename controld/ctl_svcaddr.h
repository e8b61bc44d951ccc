/* controld: a service's addresses and its layer between struct ctl_service and control.proto's
 * Service (the store's records, backups, replies), and the overlap check between services. One
 * place, so that a record, a backup and a reply say the same. */
#ifndef CTL_SVCADDR_H
#define CTL_SVCADDR_H

#include <stddef.h>

#include "control.pb-c.h"
#include "controld/ctl_store.h"

/* Why a filter on an external-layer service is refused. */
#define CTL_EXTERNAL_NO_FILTER                                                                     \
    "its connections go straight to the team's own proxy and nothing in fgex sees that traffic, "  \
    "so no filter could apply"

/* What a Service message points into for its addresses; lives as long as the message. */
struct ctl_svcmsg {
    char ip[64];
    char to[FGX_SVCADDR_TEXT_MAX];
    char text[CTL_SERVICE_ADDRS_MAX][FGX_SVCADDR_TEXT_MAX];
    Fgx__Ctl__ServiceAddr addrs[CTL_SERVICE_ADDRS_MAX];
    Fgx__Ctl__ServiceAddr *ptrs[CTL_SERVICE_ADDRS_MAX];
};

Fgx__Ctl__Layer ctl_layer_msg(enum ctl_layer layer);
/* ip, port, layer, addrs and to of m from s; m's strings point into st. Returns 0 or -EINVAL. */
int ctl_svcmsg_fill(struct ctl_svcmsg *st, const struct ctl_service *s, Fgx__Ctl__Service *m);
/* addr, port, addrs, ext_to and layer of out from m (proto set before: the layer checks it).
 * A message without addrs (stored or exported before the list existed) gives the one address
 * ip/port. Returns 0, or -EINVAL with the reason in err. */
int ctl_svcmsg_parse(const Fgx__Ctl__Service *m, struct ctl_service *out, char *err, size_t errlen);

/* The first address of a that overlaps one of b's (same protocol), as indexes; false if none. */
bool ctl_service_overlap(const struct ctl_service *a, const struct ctl_service *b, size_t *ia,
                         size_t *ib);
/* Two addresses of s itself that overlap (a list must not repeat itself). */
bool ctl_service_self_overlap(const struct ctl_service *s, size_t *i, size_t *j);
/* "ADDR:PORT" of the team's proxy: an IPv4 or IPv6 host address and a port. 0 or -EINVAL. */
int ctl_ext_to_parse(const char *text, struct fgx_svcaddr *out, const char **why);

#endif
