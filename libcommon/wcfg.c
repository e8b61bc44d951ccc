/* Ruleset generations of a worker: a pushed RULESET -> services with loaded, shared databases
 * that the data-path threads switch to with one pointer. Runs on a worker's control thread, so
 * deserializing a database never delays the data path. */
#include "fgx/wcfg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fgx/log.h"
#include "fgx/ruleset.h"

void fgx_wdb_ref(struct fgx_wdb *d)
{
    if (d != NULL)
        __atomic_add_fetch(&d->refs, 1, __ATOMIC_RELAXED);
}

void fgx_wdb_unref(struct fgx_wdb *d)
{
    if (d == NULL || __atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    fgx_hsdb_free(d->db);
    free(d->ids);
    free(d);
}

void fgx_wcfg_ref(struct fgx_wcfg *c)
{
    if (c != NULL)
        __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
}

void fgx_wcfg_unref(struct fgx_wcfg *c)
{
    size_t i;

    if (c == NULL || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (i = 0; i < c->nservices; i++) {
        fgx_wdb_unref(c->svc[i].db[0]);
        fgx_wdb_unref(c->svc[i].db[1]);
        fgx_wtls_unref(c->svc[i].tls);
        free(c->svc[i].script);
    }
    free(c->addrs);
    free(c);
}

void fgx_wtls_unref(struct fgx_wtls *t)
{
    if (t == NULL || __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (t->ctx_free != NULL)
        t->ctx_free(t->ctx);
    free(t);
}

static uint64_t tls_hash(const struct fgx_dp_service *s)
{
    uint64_t h = fgx_hash64(s->tls_cert.data, s->tls_cert.len, FGX_HASH64_SEED);

    h = fgx_hash64(s->tls_key.data, s->tls_key.len, h);
    return h ^ (s->tls_upstream_plain ? 0x9e3779b97f4a7c15ull : 0);
}

int fgx_wcfg_tls(struct fgx_wcfg *c, const struct fgx_dp_ruleset *rs, const struct fgx_wcfg *prev,
                 fgx_wtls_load_fn load, void *arg)
{
    size_t i;

    for (i = 0; i < rs->nservices && i < c->nservices; i++) {
        const struct fgx_dp_service *s = &rs->services[i];
        const struct fgx_wsvc *p;
        struct fgx_wtls *t;
        uint64_t h;

        if (s->tls_cert.len == 0)
            continue;
        h = tls_hash(s);
        p = fgx_wcfg_service(prev, s->id);
        /* Loading a key pair costs a signature check: a change to the filters must not. */
        if (p != NULL && p->tls != NULL && p->tls->hash == h && !p->tls->failed) {
            __atomic_add_fetch(&p->tls->refs, 1, __ATOMIC_RELAXED);
            c->svc[i].tls = p->tls;
            continue;
        }
        t = calloc(1, sizeof(*t));
        if (t == NULL) {
            fgx_err("ruleset: out of memory");
            return -ENOMEM;
        }
        t->refs = 1;
        t->hash = h;
        t->upstream_plain = s->tls_upstream_plain;
        if (load(arg, s, t) != 0)
            t->failed = true;
        c->svc[i].tls = t;
    }
    return 0;
}

const struct fgx_wsvc *fgx_wcfg_service(const struct fgx_wcfg *c, uint32_t id)
{
    size_t i;

    for (i = 0; c != NULL && i < c->nservices; i++)
        if (c->svc[i].id == id)
            return &c->svc[i];
    return NULL;
}

const struct fgx_wsvc *fgx_wcfg_lookup(const struct fgx_wcfg *c, uint8_t ipproto, int family,
                                       const uint8_t *addr, uint16_t port)
{
    return fgx_wcfg_lookup_addr(c, ipproto, family, addr, port, NULL);
}

const struct fgx_wsvc *fgx_wcfg_lookup_addr(const struct fgx_wcfg *c, uint8_t ipproto, int family,
                                            const uint8_t *addr, uint16_t port,
                                            const struct fgx_waddr **wa)
{
    uint32_t key = (uint32_t)ipproto << 16 | port;
    size_t lo = 0, hi;

    if (c == NULL)
        return NULL;
    hi = c->naddrs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (c->addrs[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (; lo < c->naddrs && c->addrs[lo].key == key; lo++)
        if (fgx_cidr_contains(&c->addrs[lo].cidr, family, addr)) {
            if (wa != NULL)
                *wa = &c->addrs[lo];
            return &c->svc[c->addrs[lo].svc];
        }
    return NULL;
}

static int waddr_cmp(const void *pa, const void *pb)
{
    const struct fgx_waddr *a = pa, *b = pb;

    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    /* The most specific first; controld refuses overlaps between services, so this only
     * makes the walk stop early. */
    if (a->cidr.family != 0 && b->cidr.family == 0)
        return -1;
    if (a->cidr.family == 0 && b->cidr.family != 0)
        return 1;
    if (a->cidr.prefix != b->cidr.prefix)
        return a->cidr.prefix > b->cidr.prefix ? -1 : 1;
    return a->svc < b->svc ? -1 : a->svc > b->svc;
}

/* The sorted index of every service's addresses (the one addr/port when it sent no list). */
static int index_build(const struct fgx_dp_ruleset *rs, struct fgx_wcfg *c)
{
    size_t n = 0, at = 0;

    for (size_t i = 0; i < rs->nservices; i++)
        n += rs->services[i].naddrs ? rs->services[i].naddrs : 1;
    c->addrs = calloc(n ? n : 1, sizeof(*c->addrs));
    if (c->addrs == NULL) {
        fgx_err("ruleset: out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < rs->nservices; i++) {
        const struct fgx_dp_service *s = &rs->services[i];

        if (s->naddrs == 0) {
            c->addrs[at++] = (struct fgx_waddr){
                .key = (uint32_t)s->ipproto << 16 | s->port, .svc = (uint32_t)i, .cidr = s->addr};
            continue;
        }
        for (size_t k = 0; k < s->naddrs; k++) {
            struct fgx_waddr *w = &c->addrs[at++];

            w->key = (uint32_t)s->ipproto << 16 | s->addrs[k].port;
            w->svc = (uint32_t)i;
            /* An interface: the rules sent only packets that came in (or go out) on it. */
            if (s->addrs[k].ifname[0] == '\0')
                w->cidr = s->addrs[k].cidr;
            w->edge = s->addrs[k].edge;
            w->to_port = s->addrs[k].to_port;
        }
    }
    c->naddrs = at;
    qsort(c->addrs, c->naddrs, sizeof(*c->addrs), waddr_cmp);
    return 0;
}

static struct fgx_wdb *find_db(const struct fgx_wcfg *c, uint64_t hash)
{
    size_t i;
    int d;

    for (i = 0; c != NULL && i < c->nservices; i++)
        for (d = 0; d < 2; d++)
            if (c->svc[i].db[d] != NULL && c->svc[i].db[d]->hash == hash)
                return c->svc[i].db[d];
    return NULL;
}

/* The database of one blob: the one already loaded under its hash (in prev or in the generation
 * being built), or a new one. */
static int db_get(const struct fgx_blob *b, bool known, const uint32_t *ids, size_t nids,
                  const struct fgx_wcfg *prev,
                  const struct fgx_wcfg *building, struct fgx_wdb **out)
{
    struct fgx_wdb *d;
    uint64_t hash;
    int ret;

    *out = NULL;
    if (known) {
        /* Sent as its hash: it must be one this worker runs now (or one loaded just before). */
        d = find_db(building, b->hash);
        if (d == NULL)
            d = find_db(prev, b->hash);
        if (d == NULL) {
            fgx_warn("ruleset: database %016llx is not here; controld sends it in full",
                     (unsigned long long)b->hash);
            return -ENOENT;
        }
        fgx_wdb_ref(d);
        *out = d;
        return 0;
    }
    if (b->len == 0)
        return 0;
    /* Trust a hash only as identity of the content: without one, hash the bytes themselves. */
    hash = b->hash != 0 ? b->hash : fgx_hash64(b->data, b->len, FGX_HASH64_SEED);
    d = find_db(building, hash);
    if (d == NULL)
        d = find_db(prev, hash);
    if (d != NULL) {
        fgx_wdb_ref(d);
        *out = d;
        return 0;
    }
    d = calloc(1, sizeof(*d));
    if (d == NULL) {
        fgx_err("ruleset: out of memory");
        return -ENOMEM;
    }
    /* Kept with the database, for as long as a flow's stream on it lives: that stream's
     * matches count only for the ids the flow's current database also has. */
    if (nids > 0) {
        d->ids = malloc(nids * sizeof(*d->ids));
        if (d->ids == NULL) {
            free(d);
            fgx_err("ruleset: out of memory");
            return -ENOMEM;
        }
        memcpy(d->ids, ids, nids * sizeof(*d->ids));
        d->nids = nids;
    }
    ret = fgx_hsdb_load(b->data, b->len, &d->db);
    if (ret != 0) {
        free(d->ids);
        free(d);
        return ret;
    }
    d->refs = 1;
    d->hash = hash;
    *out = d;
    return 0;
}

int fgx_wcfg_build(const struct fgx_dp_ruleset *rs, const struct fgx_wcfg *prev,
                   struct fgx_wcfg **out)
{
    struct fgx_wcfg *c;
    size_t i;
    int d, ret = 0;

    *out = NULL;
    c = calloc(1, sizeof(*c) + rs->nservices * sizeof(c->svc[0]));
    if (c == NULL) {
        fgx_err("ruleset: out of memory");
        return -ENOMEM;
    }
    c->refs = 1;
    c->generation = rs->generation;
    ret = index_build(rs, c);
    if (ret != 0)
        goto err;
    for (i = 0; i < rs->nservices; i++) {
        const struct fgx_dp_service *s = &rs->services[i];
        struct fgx_wsvc *n = &c->svc[i];

        n->id = s->id;
        n->ipproto = s->ipproto;
        n->port = s->port;
        n->addr = s->addr;
        n->fail_open = s->fail_open;
        n->midstream = s->midstream;
        n->http = s->http;
        n->http_upstream_http1 = s->http_upstream_http1;
        n->capture_conns = s->capture_conns;
        n->capture_bytes = s->capture_bytes;
        n->max_conns = s->max_conns;
        n->over_limit_forward = s->over_limit_forward;
        n->first_byte_ms = s->first_byte_ms;
        if (s->script.len > 0) {
            n->script = malloc(s->script.len);
            if (n->script == NULL) {
                ret = -ENOMEM;
                c->nservices = i + 1;
                goto err;
            }
            memcpy(n->script, s->script.data, s->script.len);
            n->script_len = s->script.len;
            n->script_deadline_ms = s->script_deadline_ms;
            n->script_dirs = s->script_dirs;
        }
        /* Counted before its databases load, so that find_db() sees this service's c2s
         * database too: filters that apply to both directions compile to one database, loaded
         * once (for 10,000 patterns that is ~18 MiB less). */
        c->nservices = i + 1;
        for (d = 0; d < 2; d++) {
            ret = db_get(&s->db[d], s->db_known[d], s->ids[d], s->nids[d], prev, c,
                         &n->db[d]);
            if (ret != 0) {
                fgx_err("ruleset: generation %llu, service %u: database %s refused",
                        (unsigned long long)rs->generation, s->id, d == 0 ? "c2s" : "s2c");
                goto err;
            }
        }
    }
    *out = c;
    return 0;
err:
    fgx_wcfg_unref(c); /* the failed service's first database may be set: released too */
    return ret;
}
