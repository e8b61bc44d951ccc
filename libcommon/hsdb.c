/* Load half of the rulesets: turns a serialized hyperscan database received from controld (or
 * read from controld's cache) into a database the scanners use. Linked into the workers, which
 * carry only libhs_runtime: nothing here may call an hs_compile* function. */
#include "fgx/ruleset.h"

#include <errno.h>
#include <stdlib.h>

#include <hs_runtime.h>

#include "fgx/log.h"
#include "hs_err.h"

#define FNV64_PRIME 0x100000001b3ULL

const char *fgx_hs_strerror(int code)
{
    switch (code) {
    case HS_SUCCESS:
        return "success";
    case HS_INVALID:
        return "invalid parameter or database";
    case HS_NOMEM:
        return "out of memory";
    case HS_SCAN_TERMINATED:
        return "scan terminated";
    case HS_COMPILER_ERROR:
        return "compile error";
    case HS_DB_VERSION_ERROR:
        return "database built by another hyperscan version";
    case HS_DB_PLATFORM_ERROR:
        return "database built for another platform";
    case HS_DB_MODE_ERROR:
        return "database of the wrong mode";
    case HS_BAD_ALIGN:
        return "misaligned parameter";
    case HS_BAD_ALLOC:
        return "allocator returned misaligned memory";
    case HS_SCRATCH_IN_USE:
        return "scratch in use";
    case HS_ARCH_ERROR:
        return "CPU lacks the instructions hyperscan needs";
    case HS_INSUFFICIENT_SPACE:
        return "buffer too small";
    default:
        return "unknown hyperscan error";
    }
}

uint64_t fgx_hash64(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = seed;
    size_t i;

    for (i = 0; i < len; i++) {
        h ^= p[i];
        h *= FNV64_PRIME;
    }
    return h;
}

/* Here rather than beside the compiler: the workers release the blobs they receive, and must
 * not drag the compile object (and its libhs symbols) into their link. */
void fgx_blob_release(struct fgx_blob *b)
{
    if (b == NULL)
        return;
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->hash = 0;
}

int fgx_hsdb_load(const void *data, size_t len, struct hs_database **out)
{
    hs_database_t *db = NULL;
    char *info = NULL;
    size_t size;
    hs_error_t rc;
    int ret = -EINVAL;

    *out = NULL;
    if (data == NULL || len == 0) {
        fgx_err("hyperscan database: empty blob refused");
        goto out;
    }
    /* Read the header first so that a blob which is truncated, foreign or of another version is
     * refused by name before anything is allocated from its claims. */
    rc = hs_serialized_database_size(data, len, &size);
    if (rc != HS_SUCCESS) {
        fgx_err("hyperscan database (%zu bytes) refused: %s", len, fgx_hs_strerror(rc));
        goto out;
    }
    rc = hs_serialized_database_info(data, len, &info);
    if (rc != HS_SUCCESS) {
        fgx_err("hyperscan database (%zu bytes) refused: %s", len, fgx_hs_strerror(rc));
        goto out;
    }
    rc = hs_deserialize_database(data, len, &db);
    if (rc != HS_SUCCESS) {
        fgx_err("hyperscan database (%zu bytes, %s) refused: %s", len, info, fgx_hs_strerror(rc));
        ret = rc == HS_NOMEM ? -ENOMEM : -EINVAL;
        goto out;
    }
    fgx_debug("hyperscan database loaded: %zu bytes serialized, %zu in memory, %s", len, size,
              info);
    *out = db;
    ret = 0;
out:
    /* hyperscan allocates the info string with its misc allocator, malloc unless set. */
    free(info);
    return ret;
}

void fgx_hsdb_free(struct hs_database *db)
{
    if (db != NULL)
        hs_free_database(db);
}
