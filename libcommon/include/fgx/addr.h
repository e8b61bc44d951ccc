/* Addresses and prefixes of services: "10.0.0.2", "10.0.0.0/24", "fd00::1", "fd00::/64", or ""
 * (every address of both families). */
#ifndef FGX_ADDR_H
#define FGX_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fgx_cidr {
    uint8_t family; /* 0: any address of both families; 4 or 6 */
    uint8_t prefix; /* 0..32 or 0..128; host bits of addr are zero */
    uint8_t addr[16];
};

/* Parse text (NULL or "" gives family 0). A bare address is a /32 or /128. Host bits set below
 * the prefix are refused (-EINVAL) so that what is stored is what is meant. */
int fgx_cidr_parse(const char *text, struct fgx_cidr *out);
/* Canonical text ("" for family 0; no "/32" or "/128" suffix for a single host). */
int fgx_cidr_format(const struct fgx_cidr *c, char *buf, size_t len);
/* family is 4 or 6; addr is 4 or 16 bytes in network order. */
bool fgx_cidr_contains(const struct fgx_cidr *c, int family, const uint8_t *addr);

#endif
