/* What the two reassembly harnesses (fuzz_reasm, fuzz_norm) share: the blocked pattern's
 * database, one reassembly context per keep pool size, and the verdicts of held segments as
 * the callback gives them. Each context is made once: an input's directions are released at its
 * end, and the context must then hold and keep nothing (checked), so inputs never leak into each
 * other and the harness runs at a useful speed. Included by one harness file each. */
#ifndef FUZZ_REASM_CTX_H
#define FUZZ_REASM_CTX_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <hs/hs.h>

#include "fgx/reasm.h"

#define PATTERN "evil"
#define MAXSEG 4096

struct verdicts {
    size_t n;
    uint64_t cookie[MAXSEG];
    bool accept[MAXSEG];
};

static hs_database_t *db;
static const size_t keep_pool[4] = {1 << 20, 4096, 512, 64};
static struct fgx_reasm_ctx *ctxs[4];
static struct verdicts vs;

static void on_verdict(void *arg, uint64_t cookie, bool accept)
{
    struct verdicts *v = arg;

    assert(v->n < MAXSEG);
    v->cookie[v->n] = cookie;
    v->accept[v->n++] = accept;
}

/* From LLVMFuzzerInitialize(); name: the harness's, for the error. */
static void reasm_ctx_setup(const char *name)
{
    hs_compile_error_t *err = NULL;

    if (hs_compile(PATTERN, HS_FLAG_DOTALL | HS_FLAG_SINGLEMATCH, HS_MODE_STREAM, NULL, &db,
                   &err) != HS_SUCCESS) {
        fprintf(stderr, "%s: %s\n", name, err ? err->message : "hs_compile failed");
        abort();
    }
    for (int i = 0; i < 4; i++) {
        if (fgx_reasm_ctx_new(8192, 4096, on_verdict, &vs, &ctxs[i]) != 0 ||
            fgx_reasm_ctx_keep(ctxs[i], keep_pool[i], keep_pool[i] / 2) != 0 ||
            fgx_reasm_ctx_scratch(ctxs[i], db) != 0)
            abort();
    }
}

#endif
