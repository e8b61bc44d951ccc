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

struct fgx_wsvc {
    uint32_t id;
    uint8_t ipproto;
    uint16_t port;
    struct fgx_cidr addr;
    bool fail_open;
    uint8_t midstream; /* FGX_MIDSTREAM_RESET or FGX_MIDSTREAM_SCAN (fgx/dp.h) */
    struct fgx_wdb *db[2]; /* [0] client -> server, [1] server -> client; NULL: nothing to match */
    /* Script filters: scriptworker's SCRIPT payload (malloc'd, the generation's own; NULL: no
     * script, and the service pays nothing for them) and the deadline of a call. */
    uint8_t *script;
    size_t script_len;
    uint32_t script_deadline_ms;
    uint8_t script_dirs; /* bit 0: client->server bytes go to the script, bit 1: the others */
};

struct fgx_wcfg {
    int refs; /* __atomic */
    uint64_t generation;
    size_t nservices;
    struct fgx_wsvc svc[];
};

/* Build a generation from rs, reusing databases of prev (may be NULL) by hash and loading the
 * others. *out has one reference, owned by the caller. Returns 0, -ENOMEM or -EINVAL (a blob
 * hyperscan refuses; logged). */
int fgx_wcfg_build(const struct fgx_dp_ruleset *rs, const struct fgx_wcfg *prev,
                   struct fgx_wcfg **out);
/* NULL: no-op for all four. */
void fgx_wcfg_ref(struct fgx_wcfg *c);
void fgx_wcfg_unref(struct fgx_wcfg *c);
void fgx_wdb_ref(struct fgx_wdb *d);
void fgx_wdb_unref(struct fgx_wdb *d);

/* The service of c with this id, or NULL (c may be NULL). */
const struct fgx_wsvc *fgx_wcfg_service(const struct fgx_wcfg *c, uint32_t id);
/* The service a client reaches at (family, addr, port) over ipproto, or NULL. */
const struct fgx_wsvc *fgx_wcfg_lookup(const struct fgx_wcfg *c, uint8_t ipproto, int family,
                                       const uint8_t *addr, uint16_t port);

#endif
