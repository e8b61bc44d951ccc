/* One address of a service: where its clients reach it. An address, a prefix, an interface name
 * or any address, each with its port: "10.0.0.2:80", "10.0.0.0/24:80", "[fd00::1]:80",
 * "[fd00::/64]:80", "eth1:80", "*:80". A service holds a list of them (controld), and the
 * workers classify a packet by them (fgx/wcfg.h). */
#ifndef FGX_SVCADDR_H
#define FGX_SVCADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/addr.h"

#define FGX_IFNAME_MAX 16 /* IFNAMSIZ, with its terminating NUL */
/* Longest text fgx_svcaddr_format() writes: "[" IPv6 "/128" "]:" port, or an interface name,
 * then ",tls,to=" port. */
#define FGX_SVCADDR_TEXT_MAX 80

/* What clients speak at an address (an edge of the service, issue 26 point 6): the service's
 * own choice (TLS when it has a certificate, else TCP), TCP in the clear, or TLS terminated with
 * the service's certificate (QUIC, later, next). */
enum fgx_edge {
    FGX_EDGE_DEFAULT = 0,
    FGX_EDGE_TCP = 1,
    FGX_EDGE_TLS = 2,
};
#define FGX_EDGE_MAX FGX_EDGE_TLS

struct fgx_svcaddr {
    /* ifname[0] != 0: packets that arrive on (client -> server) or leave by (server -> client)
     * that interface; cidr is then family 0. Else cidr, family 0 meaning any address. */
    struct fgx_cidr cidr;
    char ifname[FGX_IFNAME_MAX];
    uint16_t port;
    /* The edge (enum fgx_edge) and the port the service really listens on for it (0: port
     * itself): a proxy-layer service published on a second port. Not part of the address:
     * equality and overlap ignore them. */
    uint8_t edge;
    uint16_t to_port;
};

/* Parse "ADDR[:PORT][,EDGE][,to=PORT]" (ADDR: an IPv4 address or prefix, an IPv6 one in
 * brackets when a port follows, an interface name, or "*" for any address; EDGE tcp or tls;
 * to=: the port the service listens on). Without a port, default_port is used;
 * 0 there makes a missing port an error. An IPv4-mapped IPv6 address is taken as IPv4.
 * Returns 0 or -EINVAL; on error, *why (when not NULL) names the reason (a static string). */
int fgx_svcaddr_parse(const char *text, uint16_t default_port, struct fgx_svcaddr *out,
                      const char **why);
/* The address alone ("10.0.0.0/24", "fd00::1", "eth1", "" for any) and the whole canonical
 * text ("10.0.0.0/24:80", "[fd00::1]:80", "eth1:80", "*:80", "*:8443,tls,to=8080": the edge
 * and the service's port when set). 0 or -ENOSPC / -EINVAL. */
int fgx_svcaddr_format_addr(const struct fgx_svcaddr *a, char *buf, size_t len);
int fgx_svcaddr_format(const struct fgx_svcaddr *a, char *buf, size_t len);
/* Parse the address alone, as stored ("" any, an address or prefix, an interface name). */
int fgx_svcaddr_parse_addr(const char *text, uint16_t port, struct fgx_svcaddr *out);
/* true when some packet could belong to both (the same port and overlapping addresses). An
 * interface overlaps every address on its port: which addresses an interface carries is not
 * known in advance, and the proxy layer cannot tell interfaces apart. */
bool fgx_svcaddr_overlap(const struct fgx_svcaddr *a, const struct fgx_svcaddr *b);
bool fgx_svcaddr_equal(const struct fgx_svcaddr *a, const struct fgx_svcaddr *b);
/* A name Linux accepts for an interface (1..15 bytes, no '/', ':', ',', blank, not "." or ".."). */
bool fgx_ifname_valid(const char *name);
/* "tcp", "tls" for an edge; "" for FGX_EDGE_DEFAULT (and an unknown one). */
const char *fgx_edge_name(unsigned edge);

#endif
