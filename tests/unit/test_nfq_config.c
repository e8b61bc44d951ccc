/* Unit tests for nfqworker's config stage (nfq_config.c): generations share loaded databases by
 * hash, references keep them alive exactly as long as a config or a flow needs them, and a bad
 * push leaves the previous generation untouched. */
#include <criterion/criterion.h>

#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "fgx/ruleset.h"
#include "nfqworker/nfq.h"

static struct fgx_blob evil, zzz;

static void compile(const char *re, uint32_t id, struct fgx_blob *out)
{
    struct fgx_pattern p = {id, re, FGX_DIR_C2S, false};
    char err[256];

    cr_assert_eq(fgx_ruleset_compile(&p, 1, FGX_DIR_C2S, IPPROTO_TCP, out, err, sizeof(err)), 0,
                 "%s", err);
    cr_assert_gt(out->len, 0);
}

static void setup(void)
{
    compile("evil[0-9]+", 5, &evil);
    compile("zzz", 6, &zzz);
}

static void teardown(void)
{
    fgx_blob_release(&evil);
    fgx_blob_release(&zzz);
}

TestSuite(nfq_config, .init = setup, .fini = teardown);

static int refs(const struct nfq_db *d)
{
    return __atomic_load_n(&d->refs, __ATOMIC_RELAXED);
}

static int build(uint64_t gen, const struct fgx_blob *a, const struct fgx_blob *b,
                 const struct nfq_config *prev, struct nfq_config **out)
{
    struct fgx_dp_service s[2];
    struct fgx_dp_ruleset rs = {.generation = gen, .nservices = 2, .services = s};

    memset(s, 0, sizeof(s));
    s[0].id = 1;
    s[0].ipproto = IPPROTO_TCP;
    s[0].port = 80;
    s[0].db[0] = *a;
    s[1].id = 2;
    s[1].ipproto = IPPROTO_TCP;
    s[1].port = 81;
    s[1].db[0] = *b;
    return nfq_config_build(&rs, prev, out);
}

Test(nfq_config, equal_databases_are_loaded_once)
{
    struct nfq_config *c = NULL;

    cr_assert_eq(build(1, &evil, &evil, NULL, &c), 0);
    cr_assert_eq(c->generation, 1);
    cr_assert_eq(c->nservices, 2);
    cr_assert_eq(c->svc[0].db[0], c->svc[1].db[0]);
    cr_assert_eq(refs(c->svc[0].db[0]), 2);
    cr_assert_null(c->svc[0].db[1]);
    cr_assert_eq(nfq_config_service(c, 2), &c->svc[1]);
    cr_assert_null(nfq_config_service(c, 3));
    nfq_config_unref(c);
}

Test(nfq_config, both_directions_of_one_service_share_their_database)
{
    struct fgx_dp_service s = {.id = 1, .ipproto = IPPROTO_TCP, .port = 80};
    struct fgx_dp_ruleset rs = {.generation = 1, .nservices = 1, .services = &s};
    struct nfq_config *c = NULL;

    /* filters of direction "both": the same compiled database for c2s and s2c */
    s.db[0] = evil;
    s.db[1] = evil;
    cr_assert_eq(nfq_config_build(&rs, NULL, &c), 0);
    cr_assert_not_null(c->svc[0].db[0]);
    cr_assert_eq(c->svc[0].db[0], c->svc[0].db[1]);
    cr_assert_eq(refs(c->svc[0].db[0]), 2);
    nfq_config_unref(c);
}

Test(nfq_config, next_generation_reuses_unchanged_databases)
{
    struct nfq_config *c1 = NULL, *c2 = NULL;
    struct nfq_db *e, *z;

    cr_assert_eq(build(1, &evil, &zzz, NULL, &c1), 0);
    e = c1->svc[0].db[0];
    z = c1->svc[1].db[0];
    cr_assert_neq(e, z);
    /* service 2 switches to evil: both services now share the loaded evil database */
    cr_assert_eq(build(2, &evil, &evil, c1, &c2), 0);
    cr_assert_eq(c2->svc[0].db[0], e);
    cr_assert_eq(c2->svc[1].db[0], e);
    cr_assert_eq(refs(e), 3);
    cr_assert_eq(refs(z), 1);
    /* a flow still on zzz keeps it alive after the generation that loaded it is gone */
    nfq_db_ref(z);
    nfq_config_unref(c1);
    cr_assert_eq(refs(e), 2);
    cr_assert_eq(refs(z), 1);
    cr_assert_not_null(z->db);
    nfq_db_unref(z); /* the flow ends: freed (ASan checks) */
    nfq_config_unref(c2);
}

Test(nfq_config, databases_without_hash_are_identified_by_content)
{
    struct fgx_blob a = evil, b = evil;
    struct nfq_config *c = NULL;

    a.hash = 0;
    b.hash = 0;
    cr_assert_eq(build(1, &a, &b, NULL, &c), 0);
    cr_assert_eq(c->svc[0].db[0], c->svc[1].db[0]);
    cr_assert_eq(c->svc[0].db[0]->hash, fgx_hash64(evil.data, evil.len, FGX_HASH64_SEED));
    nfq_config_unref(c);
}

Test(nfq_config, refused_push_leaves_the_previous_generation_alone)
{
    struct nfq_config *c1 = NULL, *c2 = (struct nfq_config *)1;
    struct fgx_blob bad = {.data = "not a database", .len = 14, .hash = 42};

    cr_assert_eq(build(1, &evil, &zzz, NULL, &c1), 0);
    cr_assert_eq(build(2, &evil, &bad, c1, &c2), -EINVAL);
    cr_assert_null(c2);
    /* the reference the failed build took on evil was given back */
    cr_assert_eq(refs(c1->svc[0].db[0]), 1);
    cr_assert_eq(refs(c1->svc[1].db[0]), 1);
    nfq_config_unref(c1);
}

Test(nfq_config, null_is_a_noop)
{
    nfq_config_unref(NULL);
    nfq_config_ref(NULL);
    nfq_db_ref(NULL);
    nfq_db_unref(NULL);
    cr_assert_null(nfq_config_service(NULL, 1));
}
