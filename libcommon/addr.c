/* Service addresses: the text a user gives ("10.0.0.0/24", "fd00::1", "") to the prefix
 * controld stores, and the match a worker applies to each packet's address. Parsing is strict
 * so that what is stored is exactly what the user meant. */
#include "fgx/addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Longest accepted text: a full IPv6 address with an embedded IPv4 tail plus "/128". */
#define CIDR_TEXT_MAX (INET6_ADDRSTRLEN + 4)

static unsigned family_bits(int family)
{
    return family == 4 ? 32 : 128;
}

static int prefix_parse(const char *s, unsigned max, unsigned *out)
{
    unsigned v = 0;
    size_t i;

    /* strtoul would accept signs, spaces and "0x"; a prefix is one to three decimal digits. */
    if (s[0] == '\0' || strlen(s) > 3)
        return -EINVAL;
    for (i = 0; s[i] != '\0'; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

/* True when every bit of addr below the first prefix bits is zero. */
static bool host_bits_zero(const uint8_t *addr, unsigned nbits, unsigned prefix)
{
    unsigned i;

    for (i = prefix; i < nbits; i++) {
        if (addr[i / 8] & (0x80u >> (i % 8)))
            return false;
    }
    return true;
}

static bool v4mapped(const uint8_t *addr)
{
    static const uint8_t head[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

    return memcmp(addr, head, sizeof(head)) == 0;
}

int fgx_cidr_parse(const char *text, struct fgx_cidr *out)
{
    char buf[CIDR_TEXT_MAX + 1];
    struct fgx_cidr c;
    char *slash;
    unsigned prefix;
    size_t len;
    int family;

    memset(&c, 0, sizeof(c));
    if (text == NULL || text[0] == '\0') {
        *out = c;
        return 0;
    }
    len = strlen(text);
    if (len > CIDR_TEXT_MAX)
        return -EINVAL;
    memcpy(buf, text, len + 1);

    slash = strchr(buf, '/');
    if (slash != NULL)
        *slash = '\0';
    family = strchr(buf, ':') != NULL ? 6 : 4;
    if (inet_pton(family == 4 ? AF_INET : AF_INET6, buf, c.addr) != 1)
        return -EINVAL;

    prefix = family_bits(family);
    if (slash != NULL && prefix_parse(slash + 1, family_bits(family), &prefix) < 0)
        return -EINVAL;
    if (!host_bits_zero(c.addr, family_bits(family), prefix))
        return -EINVAL;
    if (family == 6 && prefix >= 96 && v4mapped(c.addr)) {
        /* An IPv4 peer of a dual-stack socket shows as ::ffff:a.b.c.d, but on the wire, where
         * the rules and the workers look, its packets are IPv4: an IPv6 rule for it could never
         * match. */
        memmove(c.addr, c.addr + 12, 4);
        memset(c.addr + 4, 0, 12);
        family = 4;
        prefix -= 96;
    }

    c.family = (uint8_t)family;
    c.prefix = (uint8_t)prefix;
    *out = c;
    return 0;
}

int fgx_cidr_format(const struct fgx_cidr *c, char *buf, size_t len)
{
    char addr[INET6_ADDRSTRLEN];
    int n;

    if (c->family == 0) {
        if (len < 1)
            return -ENOSPC;
        buf[0] = '\0';
        return 0;
    }
    if ((c->family != 4 && c->family != 6) || c->prefix > family_bits(c->family))
        return -EINVAL;
    if (inet_ntop(c->family == 4 ? AF_INET : AF_INET6, c->addr, addr, sizeof(addr)) == NULL)
        return -EINVAL;

    if (c->prefix == family_bits(c->family))
        n = snprintf(buf, len, "%s", addr);
    else
        n = snprintf(buf, len, "%s/%u", addr, (unsigned)c->prefix);
    if (n < 0 || (size_t)n >= len)
        return -ENOSPC;
    return 0;
}

bool fgx_cidr_contains(const struct fgx_cidr *c, int family, const uint8_t *addr)
{
    unsigned full, rest;

    if (family != 4 && family != 6)
        return false;
    if (c->family == 0)
        return true;
    if (c->family != family || addr == NULL)
        return false;

    if (c->prefix > family_bits(family))
        return false;
    full = c->prefix / 8;
    rest = c->prefix % 8;
    if (memcmp(c->addr, addr, full) != 0)
        return false;
    if (rest != 0) {
        uint8_t mask = (uint8_t)(0xffu << (8 - rest));

        if ((c->addr[full] & mask) != (addr[full] & mask))
            return false;
    }
    return true;
}
