/* controld compile stage: turns the stored services and filters into what the data path needs,
 * the worker's ruleset (compiled databases per direction, through the dbcache) and the list of
 * services the nftables rules must queue. */
#ifndef CTL_RULESET_H
#define CTL_RULESET_H

#include <stdbool.h>
#include <stddef.h>

#include "controld/ctl_nft.h"
#include "controld/ctl_store.h"
#include "fgx/dp.h"

struct ctl_ruleset {
    struct fgx_dp_ruleset dp;    /* the next generation; every blob owned by the struct */
    struct ctl_nft_service *nft; /* the running nfqueue-layer services */
    size_t nnft;
    /* The proxy worker's ruleset (same generation) and the running proxy-layer services. */
    struct fgx_dp_ruleset px_dp;
    struct ctl_nft_service *px;
    size_t npx;
};

/* Build from what t sees, in a write transaction: databases missing from the cache are compiled
 * and stored in it, entries no longer used are dropped, and a new generation is taken. A
 * compile error gives -EINVAL with hyperscan's message in err (the caller aborts t, so nothing
 * is stored). *out released with ctl_ruleset_release(). */
int ctl_ruleset_build(struct ctl_txn *t, struct ctl_ruleset *out, char *err, size_t errlen);
void ctl_ruleset_release(struct ctl_ruleset *rs);

/* One direction's database of pats[]: from the dbcache, else from the compile session
 * (ctl_compile.h), else compiled now, and cached in t. *key gets its cache key (0 and an empty
 * *out when no pattern applies to dir). A compile error is -EINVAL with the reason in err. */
int ctl_ruleset_db_get(struct ctl_txn *t, const struct fgx_pattern *pats, size_t n,
                       enum fgx_dir dir, int ipproto, struct fgx_blob *out, uint64_t *key,
                       char *err, size_t errlen);

/* true when both rulesets queue exactly the same services the same way. */
bool ctl_ruleset_nft_equal(const struct ctl_nft_service *a, size_t na,
                           const struct ctl_nft_service *b, size_t nb);

#endif
