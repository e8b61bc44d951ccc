/* Unit tests for the workers' ruleset generations (libcommon/wcfg.c): generations share loaded
 * databases by hash, references keep them alive exactly as long as a generation or a flow needs
 * them, a bad push leaves the previous generation untouched, and lookups find the service a
 * client reaches. */
#include <criterion/criterion.h>

#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "fgx/ruleset.h"
#include "fgx/wcfg.h"

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

TestSuite(wcfg, .init = setup, .fini = teardown);

static int refs(const struct fgx_wdb *d)
{
    return __atomic_load_n(&d->refs, __ATOMIC_RELAXED);
}

static int build(uint64_t gen, const struct fgx_blob *a, const struct fgx_blob *b,
                 const struct fgx_wcfg *prev, struct fgx_wcfg **out)
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
    return fgx_wcfg_build(&rs, prev, out);
}

Test(wcfg, equal_databases_are_loaded_once)
{
    struct fgx_wcfg *c = NULL;

    cr_assert_eq(build(1, &evil, &evil, NULL, &c), 0);
    cr_assert_eq(c->generation, 1);
    cr_assert_eq(c->nservices, 2);
    cr_assert_eq(c->svc[0].db[0], c->svc[1].db[0]);
    cr_assert_eq(refs(c->svc[0].db[0]), 2);
    cr_assert_null(c->svc[0].db[1]);
    cr_assert_eq(fgx_wcfg_service(c, 2), &c->svc[1]);
    cr_assert_null(fgx_wcfg_service(c, 3));
    fgx_wcfg_unref(c);
}

Test(wcfg, both_directions_of_one_service_share_their_database)
{
    struct fgx_dp_service s = {.id = 1, .ipproto = IPPROTO_TCP, .port = 80};
    struct fgx_dp_ruleset rs = {.generation = 1, .nservices = 1, .services = &s};
    struct fgx_wcfg *c = NULL;

    /* filters of direction "both": the same compiled database for c2s and s2c */
    s.db[0] = evil;
    s.db[1] = evil;
    cr_assert_eq(fgx_wcfg_build(&rs, NULL, &c), 0);
    cr_assert_not_null(c->svc[0].db[0]);
    cr_assert_eq(c->svc[0].db[0], c->svc[0].db[1]);
    cr_assert_eq(refs(c->svc[0].db[0]), 2);
    fgx_wcfg_unref(c);
}

Test(wcfg, next_generation_reuses_unchanged_databases)
{
    struct fgx_wcfg *c1 = NULL, *c2 = NULL;
    struct fgx_wdb *e, *z;

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
    fgx_wdb_ref(z);
    fgx_wcfg_unref(c1);
    cr_assert_eq(refs(e), 2);
    cr_assert_eq(refs(z), 1);
    cr_assert_not_null(z->db);
    fgx_wdb_unref(z); /* the flow ends: freed (ASan checks) */
    fgx_wcfg_unref(c2);
}

Test(wcfg, databases_without_hash_are_identified_by_content)
{
    struct fgx_blob a = evil, b = evil;
    struct fgx_wcfg *c = NULL;

    a.hash = 0;
    b.hash = 0;
    cr_assert_eq(build(1, &a, &b, NULL, &c), 0);
    cr_assert_eq(c->svc[0].db[0], c->svc[1].db[0]);
    cr_assert_eq(c->svc[0].db[0]->hash, fgx_hash64(evil.data, evil.len, FGX_HASH64_SEED));
    fgx_wcfg_unref(c);
}

Test(wcfg, refused_push_leaves_the_previous_generation_alone)
{
    struct fgx_wcfg *c1 = NULL, *c2 = (struct fgx_wcfg *)1;
    struct fgx_blob bad = {.data = "not a database", .len = 14, .hash = 42};

    cr_assert_eq(build(1, &evil, &zzz, NULL, &c1), 0);
    cr_assert_eq(build(2, &evil, &bad, c1, &c2), -EINVAL);
    cr_assert_null(c2);
    /* the reference the failed build took on evil was given back */
    cr_assert_eq(refs(c1->svc[0].db[0]), 1);
    cr_assert_eq(refs(c1->svc[1].db[0]), 1);
    fgx_wcfg_unref(c1);
}

Test(wcfg, null_is_a_noop)
{
    fgx_wcfg_unref(NULL);
    fgx_wcfg_ref(NULL);
    fgx_wdb_ref(NULL);
    fgx_wdb_unref(NULL);
    cr_assert_null(fgx_wcfg_service(NULL, 1));
}

Test(wcfg, lookup_matches_protocol_port_and_address)
{
    struct fgx_dp_service s[2];
    struct fgx_dp_ruleset rs = {.generation = 1, .nservices = 2, .services = s};
    const uint8_t in[4] = {10, 0, 0, 7}, out[4] = {10, 0, 1, 7};
    struct fgx_wcfg *c = NULL;

    memset(s, 0, sizeof(s));
    s[0].id = 1;
    s[0].ipproto = IPPROTO_TCP;
    s[0].port = 80;
    cr_assert_eq(fgx_cidr_parse("10.0.0.0/24", &s[0].addr), 0);
    s[1].id = 2;
    s[1].ipproto = IPPROTO_UDP;
    s[1].port = 80;
    cr_assert_eq(fgx_cidr_parse("", &s[1].addr), 0);
    cr_assert_eq(fgx_wcfg_build(&rs, NULL, &c), 0);
    cr_assert_eq(fgx_wcfg_lookup(c, IPPROTO_TCP, 4, in, 80), &c->svc[0]);
    cr_assert_null(fgx_wcfg_lookup(c, IPPROTO_TCP, 4, out, 80));
    cr_assert_null(fgx_wcfg_lookup(c, IPPROTO_TCP, 4, in, 81));
    cr_assert_eq(fgx_wcfg_lookup(c, IPPROTO_UDP, 4, out, 80), &c->svc[1]);
    cr_assert_null(fgx_wcfg_lookup(NULL, IPPROTO_TCP, 4, in, 80));
    fgx_wcfg_unref(c);
}

/* A database sent as its hash only (controld knows the worker holds it) is the loaded one; one
 * the worker does not hold refuses the generation and leaves the previous one alone. */
Test(wcfg, a_known_database_is_taken_from_the_running_generation)
{
    struct fgx_dp_service s = {.id = 1, .ipproto = IPPROTO_TCP, .port = 80};
    struct fgx_dp_ruleset rs = {.generation = 2, .nservices = 1, .services = &s};
    struct fgx_wcfg *c1 = NULL, *c2 = NULL, *c3 = NULL;

    cr_assert_eq(build(1, &evil, &zzz, NULL, &c1), 0);
    s.db[0] = (struct fgx_blob){.hash = zzz.hash};
    s.db_known[0] = true;
    cr_assert_eq(fgx_wcfg_build(&rs, c1, &c2), 0);
    cr_assert_eq(c2->svc[0].db[0], c1->svc[1].db[0]);
    cr_assert_eq(refs(c1->svc[1].db[0]), 2);
    rs.generation = 3;
    s.db[0].hash = zzz.hash ^ 1;
    cr_assert_eq(fgx_wcfg_build(&rs, c1, &c3), -ENOENT);
    cr_assert_null(c3);
    cr_assert_eq(fgx_wcfg_build(&rs, NULL, &c3), -ENOENT, "a fresh worker holds nothing");
    cr_assert_eq(refs(c1->svc[1].db[0]), 2);
    fgx_wcfg_unref(c2);
    fgx_wcfg_unref(c1);
}
