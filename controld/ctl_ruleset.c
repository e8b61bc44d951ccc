/* controld compile stage: stored filters -> hyperscan databases per service and direction
 * (compiled once, then served from the LMDB dbcache) -> the worker's fgx_dp_ruleset and the
 * service list for ctl_nft_sync(). */
#include "controld/ctl_ruleset.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controld/ctl_compile.h"
#include "controld/ctl_game.h"
#include "fgx/capture.h"
#include "controld/ctl_script.h"
#include "fgx/log.h"

static bool dir_has_pattern(const struct fgx_pattern *pats, size_t n, enum fgx_dir dir)
{
    for (size_t i = 0; i < n; i++)
        if (pats[i].dir & dir)
            return true;
    return false;
}

static int id_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a & FGX_FILTER_ID_MASK,
             y = *(const uint32_t *)b & FGX_FILTER_ID_MASK;

    return x < y ? -1 : x > y;
}

/* The filter ids compiled into one direction's database, ascending: a worker keeps an open
 * flow's old stream across a change and believes its matches only for ids still listed, and
 * judges them by the FGX_FILTER_ID_LOG bit listed (what the filter is now). */
static int ids_get(const struct fgx_pattern *pats, size_t n, enum fgx_dir dir, uint32_t **ids,
                   size_t *nids)
{
    size_t m = 0;

    *ids = NULL;
    *nids = 0;
    if (!dir_has_pattern(pats, n, dir))
        return 0;
    *ids = malloc(n * sizeof(**ids));
    if (*ids == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (pats[i].dir & dir)
            (*ids)[m++] = pats[i].filter_id; /* with FGX_FILTER_ID_LOG for a log filter */
    qsort(*ids, m, sizeof(**ids), id_cmp);
    *nids = m;
    return 0;
}

int ctl_ruleset_db_get(struct ctl_txn *t, const struct fgx_pattern *pats, size_t n,
                       enum fgx_dir dir, int ipproto, struct fgx_blob *out, uint64_t *key,
                       char *err, size_t errlen)
{
    int rv;

    memset(out, 0, sizeof(*out));
    *key = 0;
    if (!dir_has_pattern(pats, n, dir))
        return 0;
    *key = fgx_ruleset_key(pats, n, dir, ipproto);
    rv = ctl_store_dbcache_get(t, *key, out);
    if (rv != -ENOENT)
        return rv;
    /* A compile child's result (or, in a probe, recorded for one: *out stays empty). */
    if (ctl_compile_db_result(pats, n, dir, ipproto, *key, out, &rv, err, errlen)) {
        if (rv < 0 || out->len == 0)
            return rv;
        return ctl_store_dbcache_put(t, *key, out);
    }
    rv = fgx_ruleset_compile(pats, n, dir, ipproto, out, err, errlen);
    if (rv < 0)
        return rv;
    out->hash = *key;
    if (out->len == 0)
        return 0;
    return ctl_store_dbcache_put(t, *key, out);
}

_Static_assert(CTL_NFT_ADDRS_MAX == CTL_SERVICE_ADDRS_MAX, "one address list, one bound");

static void nft_service_fill(struct ctl_nft_service *ns, const struct ctl_service *s)
{
    memset(ns, 0, sizeof(*ns));
    ns->id = s->id;
    ns->ipproto = s->ipproto;
    ns->port = s->port;
    ns->addr = s->addr;
    ns->fail_open = s->fail_open;
    memcpy(ns->addrs, s->addrs, s->naddrs * sizeof(ns->addrs[0]));
    ns->naddrs = s->naddrs;
}

int ctl_ruleset_build(struct ctl_txn *t, struct ctl_ruleset *out, char *err, size_t errlen)
{
    struct ctl_service *svcs = NULL;
    struct ctl_filter *fs = NULL;
    struct fgx_pattern *pats = NULL;
    uint64_t *keys = NULL;
    size_t nsvcs = 0, nfs = 0, nkeys = 0;
    struct ctl_game game;
    int rv;

    memset(out, 0, sizeof(*out));
    ctl_game_init(&game);
    if (errlen)
        err[0] = '\0';
    rv = ctl_store_service_list(t, &svcs, &nsvcs);
    if (rv < 0)
        goto out;
    rv = ctl_store_filter_list(t, 0, &fs, &nfs);
    if (rv < 0)
        goto out;
    rv = ctl_game_load(t, &game);
    if (rv < 0)
        goto out;
    rv = -ENOMEM;
    pats = calloc(nfs + 1, sizeof(*pats)); /* the flag format too */
    keys = calloc(2 * nsvcs + 1, sizeof(*keys));
    out->dp.services = calloc(nsvcs ? nsvcs : 1, sizeof(*out->dp.services));
    out->nft = calloc(nsvcs ? nsvcs : 1, sizeof(*out->nft));
    out->px_dp.services = calloc(nsvcs ? nsvcs : 1, sizeof(*out->px_dp.services));
    out->px = calloc(nsvcs ? nsvcs : 1, sizeof(*out->px));
    if (!pats || !keys || !out->dp.services || !out->nft || !out->px_dp.services || !out->px)
        goto out;
    for (size_t i = 0; i < nsvcs; i++) {
        const struct ctl_service *s = &svcs[i];
        bool proxy = s->layer == CTL_LAYER_PROXY;
        struct ctl_nft_service *ns;
        struct fgx_dp_service *d;
        size_t np = 0;

        if (!s->active)
            continue;
        if (s->layer == CTL_LAYER_EXTERNAL) {
            /* No worker: the rules alone hand its connections to the team's proxy. */
            ns = &out->px[out->npx++];
            nft_service_fill(ns, s);
            ns->external = true;
            ns->to = s->ext_to;
            continue;
        }
        for (size_t j = 0; j < nfs; j++) {
            if (fs[j].service_id != s->id || !fs[j].active)
                continue;
            pats[np++] = (struct fgx_pattern){.filter_id = ctl_filter_hs_id(&fs[j]),
                                              .regex = fs[j].regex,
                                              .dir = fs[j].dir,
                                              .nocase = fs[j].nocase};
        }
        /* The game's flag format, one more pattern of what the service sends (issue 28): a
         * service of no game, or UDP, pays nothing. */
        if (ctl_game_is_set(&game) && s->ipproto == IPPROTO_TCP)
            pats[np++] = (struct fgx_pattern){.filter_id = CTL_GAME_FLAG_ID | FGX_FILTER_ID_LOG,
                                              .regex = game.flag,
                                              .dir = FGX_DIR_S2C,
                                              .nocase = false};
        d = proxy ? &out->px_dp.services[out->px_dp.nservices++]
                  : &out->dp.services[out->dp.nservices++];
        d->id = s->id;
        d->ipproto = s->ipproto;
        d->port = s->port;
        d->addr = s->addr;
        d->fail_open = s->fail_open;
        d->midstream = s->midstream;
        d->addrs = malloc(s->naddrs * sizeof(*d->addrs));
        if (!d->addrs) {
            rv = -ENOMEM;
            snprintf(err, errlen, "service %s: %s", s->name, ctl_store_strerror(rv));
            goto out;
        }
        memcpy(d->addrs, s->addrs, s->naddrs * sizeof(*d->addrs));
        d->naddrs = s->naddrs;
        if (proxy && s->tls) {
            struct ctl_tls_pem pem;

            rv = ctl_store_tls_get(t, s->id, &pem);
            if (rv < 0) {
                snprintf(err, errlen, "service %s: its TLS certificate and key: %s", s->name,
                         rv == -ENOENT ? "not in the store" : ctl_store_strerror(rv));
                goto out;
            }
            /* Moved into the ruleset, released with it. */
            d->tls_cert = (struct fgx_blob){.data = pem.cert, .len = pem.cert_len};
            d->tls_key = (struct fgx_blob){.data = pem.key, .len = pem.key_len};
            d->tls_upstream_plain = s->upstream_plain;
        }
        d->http = proxy && s->http;
        d->http_upstream_http1 = d->http && s->upstream_http1;
        d->max_conns = s->max_conns;
        d->over_limit_forward = s->over_limit_forward;
        d->first_byte_ms = s->first_byte_timeout * 1000u;
        if (!s->capture_off) {
            d->capture_conns = s->capture_conns ? s->capture_conns : FGX_CAP_CONNS_DEFAULT;
            d->capture_bytes = s->capture_bytes ? s->capture_bytes : FGX_CAP_BYTES_DEFAULT;
        }
        rv = ctl_script_payload(t, s->id, &d->script, &d->script_deadline_ms, &d->script_dirs);
        if (rv < 0 && rv != -ENOENT) {
            snprintf(err, errlen, "service %s: cannot read its script: %s", s->name,
                     ctl_store_strerror(rv));
            goto out;
        }
        rv = 0;
        for (int k = 0; k < 2; k++) {
            enum fgx_dir dir = k == 0 ? FGX_DIR_C2S : FGX_DIR_S2C;
            uint64_t key;

            rv = ctl_ruleset_db_get(t, pats, np, dir, s->ipproto, &d->db[k], &key, err, errlen);
            if (rv < 0) {
                if (rv != -EINVAL || (errlen && err[0] == '\0'))
                    snprintf(err, errlen, "service %s: cannot build its database: %s", s->name,
                             ctl_store_strerror(rv));
                goto out;
            }
            if (d->db[k].len)
                keys[nkeys++] = key;
            rv = d->db[k].len ? ids_get(pats, np, dir, &d->ids[k], &d->nids[k]) : 0;
            if (rv < 0) {
                snprintf(err, errlen, "service %s: %s", s->name, ctl_store_strerror(rv));
                goto out;
            }
        }
        nft_service_fill(proxy ? &out->px[out->npx++] : &out->nft[out->nnft++], s);
    }
    rv = ctl_store_dbcache_keep(t, keys, nkeys);
    if (rv == 0)
        rv = ctl_store_generation_next(t, &out->dp.generation);
    out->px_dp.generation = out->dp.generation;
    if (rv < 0 && errlen && err[0] == '\0')
        snprintf(err, errlen, "%s", ctl_store_strerror(rv));
out:
    if (rv < 0)
        ctl_ruleset_release(out);
    free(keys);
    free(pats);
    ctl_filters_free(fs, nfs);
    free(svcs);
    ctl_game_release(&game);
    return rv;
}

void ctl_ruleset_release(struct ctl_ruleset *rs)
{
    if (!rs)
        return;
    for (size_t i = 0; i < rs->dp.nservices; i++) {
        fgx_blob_release(&rs->dp.services[i].db[0]);
        fgx_blob_release(&rs->dp.services[i].db[1]);
        free(rs->dp.services[i].ids[0]);
        free(rs->dp.services[i].ids[1]);
        free(rs->dp.services[i].addrs);
        fgx_blob_release(&rs->dp.services[i].script);
    }
    for (size_t i = 0; i < rs->px_dp.nservices; i++) {
        fgx_blob_release(&rs->px_dp.services[i].db[0]);
        fgx_blob_release(&rs->px_dp.services[i].db[1]);
        free(rs->px_dp.services[i].ids[0]);
        free(rs->px_dp.services[i].ids[1]);
        free(rs->px_dp.services[i].addrs);
        ctl_tls_pem_release(&(struct ctl_tls_pem){.cert = rs->px_dp.services[i].tls_cert.data,
                                                  .key = rs->px_dp.services[i].tls_key.data,
                                                  .cert_len = rs->px_dp.services[i].tls_cert.len,
                                                  .key_len = rs->px_dp.services[i].tls_key.len});
        fgx_blob_release(&rs->px_dp.services[i].script);
    }
    free(rs->dp.services);
    free(rs->nft);
    free(rs->px_dp.services);
    free(rs->px);
    memset(rs, 0, sizeof(*rs));
}

bool ctl_ruleset_nft_equal(const struct ctl_nft_service *a, size_t na,
                           const struct ctl_nft_service *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++) {
        if (a[i].id != b[i].id || a[i].ipproto != b[i].ipproto || a[i].port != b[i].port ||
            a[i].fail_open != b[i].fail_open || a[i].naddrs != b[i].naddrs ||
            a[i].external != b[i].external ||
            (a[i].external && !fgx_svcaddr_equal(&a[i].to, &b[i].to)) ||
            memcmp(&a[i].addr, &b[i].addr, sizeof(a[i].addr)) != 0)
            return false;
        for (size_t k = 0; k < a[i].naddrs; k++)
            if (!fgx_svcaddr_equal(&a[i].addrs[k], &b[i].addrs[k]) ||
                a[i].addrs[k].to_port != b[i].addrs[k].to_port)
                return false;
    }
    return true;
}
