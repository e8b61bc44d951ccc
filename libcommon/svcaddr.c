/* Service addresses: the text a user gives for one address of a service ("10.0.0.0/24:80",
 * "[fd00::1]:80", "eth1:80", "*:80") to the struct controld stores and the rules and workers
 * use, and the overlap test that keeps two services from claiming the same packets. Strict, so
 * that what is stored is exactly what was meant. */
#include "fgx/svcaddr.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char *why_set(const char **why, const char *msg)
{
    if (why)
        *why = msg;
    return msg;
}

bool fgx_ifname_valid(const char *name)
{
    size_t len = strlen(name);

    if (len == 0 || len >= FGX_IFNAME_MAX || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)name[i];

        /* ':' is refused although Linux allows it: it is the port separator here, and an
         * alias label is no interface the rules could match on; ',' likewise starts an edge */
        if (ch <= ' ' || ch == '/' || ch == ':' || ch == ',' || ch >= 0x7f)
            return false;
    }
    return true;
}

/* Text that looks like an address (digits, dots, hex and colons, a prefix) but did not parse as
 * one is a bad address, never an interface name: "10.0.0.300" must not become an interface. */
static bool looks_numeric(const char *s)
{
    bool colon = strchr(s, ':') != NULL;

    for (; *s; s++) {
        char ch = *s;

        if ((ch >= '0' && ch <= '9') || ch == '.' || ch == '/' || ch == ':')
            continue;
        if (colon && ((ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F')))
            continue;
        return false;
    }
    return true;
}

int fgx_svcaddr_parse_addr(const char *text, uint16_t port, struct fgx_svcaddr *out)
{
    struct fgx_svcaddr a;

    memset(&a, 0, sizeof(a));
    a.port = port;
    if (text == NULL || text[0] == '\0' || strcmp(text, "*") == 0) {
        *out = a;
        return 0;
    }
    if (fgx_cidr_parse(text, &a.cidr) == 0) {
        *out = a;
        return 0;
    }
    if (looks_numeric(text) || !fgx_ifname_valid(text))
        return -EINVAL;
    memset(&a.cidr, 0, sizeof(a.cidr));
    memcpy(a.ifname, text, strlen(text) + 1);
    *out = a;
    return 0;
}

static int port_parse(const char *s, uint16_t *out)
{
    unsigned v = 0;
    size_t i;

    if (s[0] == '\0' || strlen(s) > 5)
        return -EINVAL;
    for (i = 0; s[i]; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v == 0 || v > 65535)
        return -EINVAL;
    *out = (uint16_t)v;
    return 0;
}

int fgx_svcaddr_parse(const char *text, uint16_t default_port, struct fgx_svcaddr *out,
                      const char **why)
{
    char buf[FGX_SVCADDR_TEXT_MAX + 8];
    const char *addr = buf, *port = NULL;
    uint16_t p = default_port, to;
    uint8_t edge;
    size_t len;
    char *colon;

    if (text == NULL || text[0] == '\0') {
        why_set(why, "an empty address");
        return -EINVAL;
    }
    len = strlen(text);
    if (len >= sizeof(buf)) {
        why_set(why, "too long");
        return -EINVAL;
    }
    memcpy(buf, text, len + 1);
    /* ",tcp", ",tls", ",to=PORT" after the address: its edge (none of an address has a ',') */
    edge = FGX_EDGE_DEFAULT;
    to = 0;
    for (char *opt = strchr(buf, ','); opt != NULL;) {
        char *next = strchr(opt + 1, ',');

        *opt++ = '\0';
        if (next != NULL)
            *next = '\0';
        if (strcmp(opt, "tcp") == 0 || strcmp(opt, "tls") == 0) {
            if (edge != FGX_EDGE_DEFAULT) {
                why_set(why, "one edge per address: tcp or tls");
                return -EINVAL;
            }
            edge = opt[1] == 'c' ? FGX_EDGE_TCP : FGX_EDGE_TLS;
        } else if (strncmp(opt, "to=", 3) == 0) {
            if (to != 0 || port_parse(opt + 3, &to) < 0 || to == 0) {
                why_set(why, "to=PORT: the port the service listens on, 1 to 65535, once");
                return -EINVAL;
            }
        } else {
            why_set(why, "after the address: ,tcp or ,tls (what clients speak there) and "
                         ",to=PORT (where the service listens)");
            return -EINVAL;
        }
        opt = next;
    }
    if (buf[0] == '[') {
        char *end = strchr(buf, ']');

        if (end == NULL || (end[1] != '\0' && end[1] != ':')) {
            why_set(why, "an IPv6 address in brackets is [ADDR] or [ADDR]:PORT");
            return -EINVAL;
        }
        *end = '\0';
        addr = buf + 1;
        if (end[1] == ':')
            port = end + 2;
        if (strchr(addr, ':') == NULL) {
            why_set(why, "brackets are for IPv6 addresses");
            return -EINVAL;
        }
    } else {
        colon = strrchr(buf, ':');
        /* Two colons or more without brackets: an IPv6 address with no port. */
        if (colon != NULL && strchr(buf, ':') == colon) {
            *colon = '\0';
            port = colon + 1;
        }
    }
    if (port != NULL && port_parse(port, &p) < 0) {
        why_set(why, "the port must be a number from 1 to 65535");
        return -EINVAL;
    }
    if (p == 0) {
        why_set(why, "no port: give ADDR:PORT");
        return -EINVAL;
    }
    if (addr[0] == '\0') {
        why_set(why, "no address before the port (\"*\" is any address)");
        return -EINVAL;
    }
    if (fgx_svcaddr_parse_addr(addr, p, out) < 0) {
        why_set(why, "not an IPv4 or IPv6 address, prefix (host bits zero) or interface name");
        return -EINVAL;
    }
    out->edge = edge;
    out->to_port = to == p ? 0 : to; /* the same port: nothing to say */
    return 0;
}

const char *fgx_edge_name(unsigned edge)
{
    return edge == FGX_EDGE_TCP ? "tcp" : edge == FGX_EDGE_TLS ? "tls" : "";
}

int fgx_svcaddr_format_addr(const struct fgx_svcaddr *a, char *buf, size_t len)
{
    if (a->ifname[0] != '\0') {
        int n = snprintf(buf, len, "%s", a->ifname);

        return n < 0 || (size_t)n >= len ? -ENOSPC : 0;
    }
    return fgx_cidr_format(&a->cidr, buf, len);
}

int fgx_svcaddr_format(const struct fgx_svcaddr *a, char *buf, size_t len)
{
    char addr[FGX_SVCADDR_TEXT_MAX];
    int rv = fgx_svcaddr_format_addr(a, addr, sizeof(addr)), n;

    if (rv < 0)
        return rv;
    if (a->ifname[0] == '\0' && a->cidr.family == 0)
        n = snprintf(buf, len, "*:%u", (unsigned)a->port);
    else if (a->ifname[0] == '\0' && a->cidr.family == 6)
        n = snprintf(buf, len, "[%s]:%u", addr, (unsigned)a->port);
    else
        n = snprintf(buf, len, "%s:%u", addr, (unsigned)a->port);
    if (n >= 0 && (size_t)n < len && a->edge != FGX_EDGE_DEFAULT)
        n += snprintf(buf + n, len - (size_t)n, ",%s", fgx_edge_name(a->edge));
    if (n >= 0 && (size_t)n < len && a->to_port != 0)
        n += snprintf(buf + n, len - (size_t)n, ",to=%u", (unsigned)a->to_port);
    return n < 0 || (size_t)n >= len ? -ENOSPC : 0;
}

bool fgx_svcaddr_overlap(const struct fgx_svcaddr *a, const struct fgx_svcaddr *b)
{
    const struct fgx_cidr *shorter, *longer;

    if (a->port != b->port)
        return false;
    if (a->ifname[0] != '\0' || b->ifname[0] != '\0')
        return true;
    if (a->cidr.family == 0 || b->cidr.family == 0)
        return true;
    if (a->cidr.family != b->cidr.family)
        return false;
    shorter = a->cidr.prefix <= b->cidr.prefix ? &a->cidr : &b->cidr;
    longer = shorter == &a->cidr ? &b->cidr : &a->cidr;
    return fgx_cidr_contains(shorter, longer->family, longer->addr);
}

bool fgx_svcaddr_equal(const struct fgx_svcaddr *a, const struct fgx_svcaddr *b)
{
    unsigned n = a->cidr.family == 4 ? 4 : 16;

    return a->port == b->port && strcmp(a->ifname, b->ifname) == 0 &&
           a->cidr.family == b->cidr.family && a->cidr.prefix == b->cidr.prefix &&
           (a->cidr.family == 0 || memcmp(a->cidr.addr, b->cidr.addr, n) == 0);
}
