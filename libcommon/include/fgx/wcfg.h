/* A worker's view of one ruleset generation: the running services with their loaded hyperscan
 * databases, reference-counted so that a generation and each database live as long as a thread
 * or a connection still uses them. Built by a worker's control thread from a pushed RULESET
 * (fgx/dp.h), reusing the databases of the previous generation whose hash is unchanged, so a
 * change to one service never reloads the others. Shared by both workers (nfqworker,
 * proxyworker). */
#ifndef FGX_WCFG_H
#define FGX_WCFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/addr.h"
#include "fgx/dp.h"

struct hs_database;

/* A loaded database; freed at the last fgx_wdb_unref(). */
struct fgx_wdb {
    int refs; /* __atomic */
    uint64_t hash;
    struct hs_database *db;
    uint32_t *ids; /* the filter ids compiled into db, ascending (owned); NULL: not known */
    size_t nids;
};

/* A TLS service's certificate and key as the worker loaded them (proxyworker: its SSL_CTX
 * pair in ctx), shared by the generations that keep them unchanged; freed (ctx_free(ctx)) at
 * the last fgx_wtls_unref(). */
struct fgx_wtls {
    int refs; /* __atomic */
    uint64_t hash;       /* of the certificate, the key and upstream_plain */
    bool upstream_plain; /* plaintext to the service */
    bool failed;         /* the worker could not load them: its connections are refused */
    void *ctx;
    void (*ctx_free)(void *ctx);
};

/* Load a TLS service's certificate and key (s->tls_cert, s->tls_key) into out->ctx and
 * out->ctx_free; a failure is logged there and leaves out->failed set by the caller. */
typedef int (*fgx_wtls_load_fn)(void *arg, const struct fgx_dp_service *s, struct fgx_wtls *out);

struct fgx_wsvc {
    uint32_t id;
    uint8_t ipproto;
    uint16_t port;
    struct fgx_cidr addr;
    bool fail_open;
    bool http; /* the HTTP service kind (fgx/dp.h) */
    bool http_upstream_http1; /* its streams sent to the service as HTTP/1.1 */
    uint8_t midstream; /* FGX_MIDSTREAM_RESET or FGX_MIDSTREAM_SCAN (fgx/dp.h) */
    uint32_t capture_conns, capture_bytes; /* the whole worker's; 0: capture off */
    struct fgx_wdb *db[2]; /* [0] client -> server, [1] server -> client; NULL: nothing to match */
    /* Script filters: scriptworker's SCRIPT payload (malloc'd, the generation's own; NULL: no
     * script, and the service pays nothing for them) and the deadline of a call. */
    uint8_t *script;
    size_t script_len;
    uint32_t script_deadline_ms;
    uint8_t script_dirs; /* bit 0: client->server bytes go to the script, bit 1: the others */
    struct fgx_wtls *tls;  /* NULL: plain TCP (or the worker has no TLS: fgx_wcfg_tls()) */
    /* Its own limits (fgx/dp.h, issue 27): connections at once (0: none), past it forwarded
     * or refused, the first-byte timeout in ms (0: the worker's). */
    uint32_t max_conns;
    bool over_limit_forward;
    uint32_t first_byte_ms;
};

/* One address of one service, in the generation's lookup index. */
struct fgx_waddr {
    uint32_t key; /* ipproto << 16 | port: the index is sorted by it, then longest prefix first */
    uint32_t svc; /* index into svc[] */
    struct fgx_cidr cidr; /* family 0: any address (an interface: the rules matched it) */
    uint8_t edge;         /* what clients speak there (enum fgx_edge) */
    uint16_t to_port;     /* the port the service listens on for it; 0: the address's own */
};

struct fgx_wcfg {
    int refs; /* __atomic */
    uint64_t generation;
    /* Every address of every service, sorted: a packet's service is found by bisection on
     * (protocol, port) and a walk over that port's few addresses, however many services and
     * addresses there are. */
    struct fgx_waddr *addrs;
    size_t naddrs;
    size_t nservices;
    struct fgx_wsvc svc[];
};

/* Build a generation from rs, reusing databases of prev (may be NULL) by hash and loading the
 * others. *out has one reference, owned by the caller. Returns 0, -ENOMEM or -EINVAL (a blob
 * hyperscan refuses; logged). */
int fgx_wcfg_build(const struct fgx_dp_ruleset *rs, const struct fgx_wcfg *prev,
                   struct fgx_wcfg **out);
/* Give c's TLS services their loaded certificates: the one of prev's service with the same id
 * when its hash is unchanged, else load(arg, ...) on a new one (a failure leaves it marked
 * failed, never the whole generation refused: the other services go on). Returns 0 or
 * -ENOMEM. */
int fgx_wcfg_tls(struct fgx_wcfg *c, const struct fgx_dp_ruleset *rs, const struct fgx_wcfg *prev,
                 fgx_wtls_load_fn load, void *arg);
void fgx_wtls_unref(struct fgx_wtls *t);
/* NULL: no-op for all four. */
void fgx_wcfg_ref(struct fgx_wcfg *c);
void fgx_wcfg_unref(struct fgx_wcfg *c);
void fgx_wdb_ref(struct fgx_wdb *d);
void fgx_wdb_unref(struct fgx_wdb *d);

/* The service of c with this id, or NULL (c may be NULL). */
const struct fgx_wsvc *fgx_wcfg_service(const struct fgx_wcfg *c, uint32_t id);
/* The service a client reaches at (family, addr, port) over ipproto, or NULL. O(log addresses
 * + addresses on that port); no allocation, callable on the packet path. */
const struct fgx_wsvc *fgx_wcfg_lookup(const struct fgx_wcfg *c, uint8_t ipproto, int family,
                                       const uint8_t *addr, uint16_t port);
/* The same, and the address of the service it came by in *wa (its edge, the port the service
 * listens on for it); wa may be NULL. */
const struct fgx_wsvc *fgx_wcfg_lookup_addr(const struct fgx_wcfg *c, uint8_t ipproto, int family,
                                            const uint8_t *addr, uint16_t port,
                                            const struct fgx_waddr **wa);

#endif
