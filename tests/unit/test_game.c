/* Unit tests for the game's facts (controld/ctl_game.c): what game set accepts and refuses,
 * the store's record round trip byte for byte, a store without the record loading as no game,
 * and the checker's addresses. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "controld/ctl_game.h"

static char dir[64];
static struct ctl_store *st;

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/fgx-test-game-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(ctl_store_open(dir, 0, &st), 0);
}

static void teardown(void)
{
    static const char *const files[] = {"data.mdb", "lock.mdb", "reserve"};
    char path[128];

    ctl_store_close(st);
    st = NULL;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

TestSuite(game, .init = setup, .fini = teardown);

static int parse(const char *flag, const char *checker, const char *team, struct ctl_game *g,
                 char *err, size_t len)
{
    char *ck[1] = {(char *)checker}, *tm[1] = {(char *)team};

    return ctl_game_parse((const uint8_t *)flag, flag ? strlen(flag) : 0, ck, checker ? 1 : 0, tm,
                          team ? 1 : 0, g, err, len);
}

Test(game, parse_accepts_and_refuses)
{
    struct ctl_game g;
    char err[512];

    cr_assert_eq(parse("[A-Z0-9]{31}=", "10.10.0.0/24", "fd00:60::/32", &g, err, sizeof(err)), 0,
                 "%s", err);
    cr_assert(ctl_game_is_set(&g));
    cr_assert_eq(g.nchecker, 1);
    cr_assert_eq(g.nteam, 1);
    ctl_game_release(&g);
    cr_assert(!ctl_game_is_set(&g));

    static const struct {
        const char *flag, *checker, *why;
    } bad[] = {
        {"ab(c", "10.0.0.1", "invalid flag format"},
        {"x*", "10.0.0.1", "invalid flag format"},
        {"\\b", "10.0.0.1", "any stream"},
        {"", "10.0.0.1", "missing"},
        {"FLAG", NULL, "checker"},
        {"FLAG", "10.0.0.1/24", "invalid checker address"},
        {"FLAG", "", "invalid checker address"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        cr_assert_eq(parse(bad[i].flag, bad[i].checker, NULL, &g, err, sizeof(err)), -EINVAL,
                     "%s accepted", bad[i].flag);
        cr_assert_not_null(strstr(err, bad[i].why), "%s: %s", bad[i].flag, err);
        cr_assert(!ctl_game_is_set(&g));
    }
    /* a NUL inside is refused, not cut */
    char *ck[1] = {"10.0.0.1"};
    cr_assert_eq(ctl_game_parse((const uint8_t *)"AB\0C", 4, ck, 1, NULL, 0, &g, err, sizeof(err)),
                 -EINVAL);
}

Test(game, store_round_trip_bytes_exact)
{
    static const uint8_t flag[] = "FL\xff\xc3G[0-9]{4}";
    char *ck[2] = {"10.10.0.0/24", "fd00:10::1"}, *tm[1] = {"10.60.0.0/16"};
    struct ctl_game g, back;
    struct ctl_txn *t;
    char err[512];

    /* a store from before the game: no game */
    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_game_load(t, &back), 0);
    ctl_txn_abort(t);
    cr_assert(!ctl_game_is_set(&back));

    cr_assert_eq(ctl_game_parse(flag, sizeof(flag) - 1, ck, 2, tm, 1, &g, err, sizeof(err)), 0,
                 "%s", err);
    g.set_time = 1234;
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_game_save(t, &g), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_game_load(t, &back), 0);
    ctl_txn_abort(t);
    cr_assert_eq(back.flag_len, sizeof(flag) - 1);
    cr_assert_eq(memcmp(back.flag, flag, back.flag_len), 0);
    cr_assert_eq(back.nchecker, 2);
    cr_assert_eq(back.nteam, 1);
    cr_assert_eq(back.set_time, 1234);
    cr_assert_eq(memcmp(&back.checker[1], &g.checker[1], sizeof(g.checker[1])), 0);

    uint8_t in4[4] = {10, 10, 0, 77}, out4[4] = {10, 11, 0, 1};
    uint8_t in6[16] = {0xfd, 0x00, 0, 0x10, [15] = 1};
    cr_assert(ctl_game_is_checker(&back, 4, in4));
    cr_assert(!ctl_game_is_checker(&back, 4, out4));
    cr_assert(ctl_game_is_checker(&back, 6, in6));
    ctl_game_release(&back);

    /* cleared: the record goes, and the load says no game again */
    ctl_game_release(&g);
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_game_save(t, &g), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_game_load(t, &back), 0);
    ctl_txn_abort(t);
    cr_assert(!ctl_game_is_set(&back));
}

Test(game, finder_hashes_the_flag_that_ends_at_the_match)
{
    static const uint8_t ex[] = "GET / 200 FLAG{abc} tail";
    char *ck[1] = {"10.0.0.1"}, hex[65], err[512];
    struct ctl_game_finder *f = NULL;
    struct ctl_game g;

    cr_assert_eq(ctl_game_parse((const uint8_t *)"FLAG\\{[a-z]+\\}", 14, ck, 1, NULL, 0, &g, err,
                                sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(ctl_game_finder_new(&g, &f), 0);
    cr_assert_not_null(f);
    /* the stream scan's match ends after the '}' (byte 19) */
    size_t flen = 0;

    cr_assert_eq(ctl_game_finder_hash(f, ex, 19, hex, &flen), 0);
    cr_assert_eq(flen, 9);
    cr_assert_str_eq(hex, "41ab44854ea079f13b6ce0709b7b5a343e2dfb58912d07316a9bba2c3c8c4de0");
    /* no flag ends there: no hash */
    cr_assert_eq(ctl_game_finder_hash(f, ex, 17, hex, &flen), -ENOENT);
    ctl_game_finder_free(f);
    ctl_game_release(&g);
}
