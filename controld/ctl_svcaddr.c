/* controld: a service's address list and layer <-> control.proto Service, shared by the store
 * (records), the configuration export/import (backups) and the replies, and the overlap rules
 * that keep two services from claiming the same packets. */
#include "controld/ctl_svcaddr.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fgx/log.h"

Fgx__Ctl__Layer ctl_layer_msg(enum ctl_layer layer)
{
    switch (layer) {
    case CTL_LAYER_PROXY:
        return FGX__CTL__LAYER__LAYER_PROXY;
    case CTL_LAYER_EXTERNAL:
        return FGX__CTL__LAYER__LAYER_EXTERNAL;
    case CTL_LAYER_NFQUEUE:
        break;
    }
    return FGX__CTL__LAYER__LAYER_NFQUEUE;
}

int ctl_svcmsg_fill(struct ctl_svcmsg *st, const struct ctl_service *s, Fgx__Ctl__Service *m)
{
    if (fgx_cidr_format(&s->addr, st->ip, sizeof(st->ip)) < 0)
        return -EINVAL;
    m->ip = st->ip;
    m->port = s->port;
    m->layer = ctl_layer_msg(s->layer);
    for (size_t i = 0; i < s->naddrs && i < CTL_SERVICE_ADDRS_MAX; i++) {
        Fgx__Ctl__ServiceAddr *a = &st->addrs[i];

        fgx__ctl__service_addr__init(a);
        if (fgx_svcaddr_format_addr(&s->addrs[i], st->text[i], sizeof(st->text[i])) < 0)
            return -EINVAL;
        a->addr = st->text[i];
        a->port = s->addrs[i].port;
        a->has_edge = s->addrs[i].edge != FGX_EDGE_DEFAULT;
        a->edge = s->addrs[i].edge;
        a->has_to_port = s->addrs[i].to_port != 0;
        a->to_port = s->addrs[i].to_port;
        st->ptrs[i] = a;
    }
    m->n_addrs = s->naddrs;
    m->addrs = st->ptrs;
    m->has_http = s->http;
    m->http = s->http;
    m->has_upstream_http1 = s->http && s->upstream_http1;
    m->upstream_http1 = s->http && s->upstream_http1;
    /* only when set: a service without limits of its own stores and exports as before */
    m->has_max_conns = m->has_over_limit_forward = s->max_conns > 0;
    m->max_conns = s->max_conns;
    m->over_limit_forward = s->max_conns > 0 && s->over_limit_forward;
    m->has_first_byte_timeout = s->first_byte_timeout > 0;
    m->first_byte_timeout = s->first_byte_timeout;
    m->to = NULL;
    if (s->layer == CTL_LAYER_EXTERNAL) {
        if (fgx_svcaddr_format(&s->ext_to, st->to, sizeof(st->to)) < 0)
            return -EINVAL;
        m->to = st->to;
    }
    return 0;
}

int ctl_ext_to_parse(const char *text, struct fgx_svcaddr *out, const char **why)
{
    struct fgx_svcaddr a;

    if (fgx_svcaddr_parse(text, 0, &a, why) < 0)
        return -EINVAL;
    if (a.edge != FGX_EDGE_DEFAULT || a.to_port != 0) {
        if (why)
            *why = "the team's proxy is ADDR:PORT, without an edge";
        return -EINVAL;
    }
    /* tproxy hands a connection to a socket by one address: no prefix, no interface. */
    if (a.ifname[0] != '\0' || a.cidr.family == 0 ||
        a.cidr.prefix != (a.cidr.family == 4 ? 32 : 128)) {
        if (why)
            *why = "the team's proxy is one IPv4 or IPv6 address of this box and a port";
        return -EINVAL;
    }
    *out = a;
    return 0;
}

int ctl_svcmsg_parse(const Fgx__Ctl__Service *m, struct ctl_service *out, char *err, size_t errlen)
{
    const char *name = m->name ? m->name : "?";

    if (m->port == 0 || m->port > 65535) {
        fgx_err_set(err, errlen, "service %s: invalid port %u: use 1..65535", name, m->port);
        return -EINVAL;
    }
    out->port = (uint16_t)m->port;
    out->http = m->has_http && m->http;
    out->upstream_http1 = out->http && m->has_upstream_http1 && m->upstream_http1;
    out->max_conns = m->has_max_conns ? m->max_conns : 0;
    out->over_limit_forward = out->max_conns > 0 && m->has_over_limit_forward &&
                              m->over_limit_forward;
    out->first_byte_timeout = m->has_first_byte_timeout ? m->first_byte_timeout : 0;
    if (out->max_conns > CTL_SERVICE_MAX_CONNS_MAX ||
        out->first_byte_timeout > CTL_SERVICE_FIRST_BYTE_MAX) {
        fgx_err_set(err, errlen,
                    "service %s: max_conns at most %u, first_byte_timeout at most %u s", name,
                    CTL_SERVICE_MAX_CONNS_MAX, CTL_SERVICE_FIRST_BYTE_MAX);
        return -EINVAL;
    }
    if (fgx_cidr_parse(m->ip, &out->addr) < 0) {
        fgx_err_set(err, errlen, "service %s: invalid address \"%s\"", name, m->ip ? m->ip : "");
        return -EINVAL;
    }
    if (m->n_addrs == 0) {
        ctl_service_addrs_single(out);
    } else {
        if (m->n_addrs > CTL_SERVICE_ADDRS_MAX) {
            fgx_err_set(err, errlen, "service %s: %zu addresses, at most %d", name, m->n_addrs,
                    CTL_SERVICE_ADDRS_MAX);
            return -EINVAL;
        }
        for (size_t i = 0; i < m->n_addrs; i++) {
            const Fgx__Ctl__ServiceAddr *a = m->addrs[i];

            if (a->port == 0 || a->port > 65535 ||
                fgx_svcaddr_parse_addr(a->addr, (uint16_t)a->port, &out->addrs[i]) < 0) {
                fgx_err_set(err, errlen, "service %s: invalid address \"%s\" port %u", name,
                        a->addr ? a->addr : "", a->port);
                return -EINVAL;
            }
            if ((a->has_edge && a->edge > FGX_EDGE_MAX) || (a->has_to_port && a->to_port > 65535)) {
                fgx_err_set(err, errlen, "service %s: address \"%s\" port %u: invalid edge", name,
                            a->addr ? a->addr : "", a->port);
                return -EINVAL;
            }
            out->addrs[i].edge = (uint8_t)(a->has_edge ? a->edge : FGX_EDGE_DEFAULT);
            out->addrs[i].to_port = (uint16_t)(a->has_to_port ? a->to_port : 0);
        }
        out->naddrs = m->n_addrs;
        ctl_service_addrs_sync(out);
    }
    switch (m->layer) {
    case FGX__CTL__LAYER__LAYER_NFQUEUE:
        out->layer = CTL_LAYER_NFQUEUE;
        break;
    case FGX__CTL__LAYER__LAYER_PROXY:
    case FGX__CTL__LAYER__LAYER_EXTERNAL:
        /* both carry UDP too: the proxy relays it (px_udp.c), the external layer hands it on */
        out->layer =
            m->layer == FGX__CTL__LAYER__LAYER_PROXY ? CTL_LAYER_PROXY : CTL_LAYER_EXTERNAL;
        break;
    default:
        fgx_err_set(err, errlen, "service %s: invalid layer: use nfqueue, proxy or external", name);
        return -EINVAL;
    }
    memset(&out->ext_to, 0, sizeof(out->ext_to));
    if (out->layer == CTL_LAYER_EXTERNAL) {
        const char *why = NULL;

        if (ctl_ext_to_parse(m->to, &out->ext_to, &why) < 0) {
            fgx_err_set(err, errlen, "service %s: invalid --to \"%s\": %s", name,
                        m->to ? m->to : "", why ? why : "ADDR:PORT");
            return -EINVAL;
        }
    }
    return 0;
}

bool ctl_service_overlap(const struct ctl_service *a, const struct ctl_service *b, size_t *ia,
                         size_t *ib)
{
    if (a->ipproto != b->ipproto)
        return false;
    for (size_t i = 0; i < a->naddrs; i++)
        for (size_t j = 0; j < b->naddrs; j++)
            if (fgx_svcaddr_overlap(&a->addrs[i], &b->addrs[j])) {
                *ia = i;
                *ib = j;
                return true;
            }
    return false;
}

bool ctl_service_self_overlap(const struct ctl_service *s, size_t *i, size_t *j)
{
    for (size_t x = 0; x < s->naddrs; x++)
        for (size_t y = x + 1; y < s->naddrs; y++) {
            const struct fgx_svcaddr *a = &s->addrs[x], *b = &s->addrs[y];
            /* Within one service an interface beside an address is no conflict (both lead to
             * the same service); the same interface twice, or addresses that overlap, would be
             * the same packets twice in one set. */
            bool dup = (a->ifname[0] != '\0') == (b->ifname[0] != '\0') &&
                       fgx_svcaddr_overlap(a, b) &&
                       (a->ifname[0] == '\0' || strcmp(a->ifname, b->ifname) == 0);

            if (dup) {
                *i = x;
                *j = y;
                return true;
            }
        }
    return false;
}
