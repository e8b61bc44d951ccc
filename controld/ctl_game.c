/* The game's facts (ctl_game.h): checked here before anything is stored, kept in the meta db
 * as one encoded fgx.ctl.GameConfig, so that a later field is one more optional member and a
 * store from before the game (no record) loads as "no game set". */
#include "controld/ctl_game.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hs.h>

#include "controld/ctl_config.h"
#include "fgx/log.h"
#include "fgx/mbed_compat.h"
#include "fgx/ruleset.h"

void ctl_game_init(struct ctl_game *g)
{
    memset(g, 0, sizeof(*g));
}

void ctl_game_release(struct ctl_game *g)
{
    if (!g)
        return;
    free(g->flag);
    ctl_game_init(g);
}

static int cidrs_parse(char *const *in, size_t n, const char *what, struct fgx_cidr *out,
                       size_t *nout, char *err, size_t errlen)
{
    if (n > CTL_GAME_ADDRS_MAX) {
        fgx_err_set(err, errlen, "at most %d %s addresses", CTL_GAME_ADDRS_MAX, what);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        /* "" parses as every address of both families: never what a game means */
        if (!in[i] || !in[i][0] || fgx_cidr_parse(in[i], &out[i]) < 0 || out[i].family == 0) {
            fgx_err_set(err, errlen,
                    "invalid %s address \"%s\": give ADDR or ADDR/LEN with no host "
                    "bits set",
                    what, in[i] ? in[i] : "");
            return -EINVAL;
        }
    }
    *nout = n;
    return 0;
}

int ctl_game_parse(const uint8_t *flag, size_t flag_len, char *const *checker, size_t nchecker,
                   char *const *team, size_t nteam, struct ctl_game *out, char *err, size_t errlen)
{
    struct fgx_pattern_warnings w;
    char why[512];
    int rv;

    ctl_game_init(out);
    if (!flag || flag_len == 0) {
        fgx_err_set(err, errlen, "game: the flag format is missing (--flag REGEX)");
        return -EINVAL;
    }
    if (flag_len > CTL_GAME_FLAG_MAX || memchr(flag, '\0', flag_len)) {
        fgx_err_set(err, errlen,
                "game: the flag format has at most %d bytes and no NUL byte (write "
                "it \\x00)",
                CTL_GAME_FLAG_MAX);
        return -EINVAL;
    }
    if (nchecker == 0) {
        fgx_err_set(err, errlen,
                "game: give the checker's addresses (--checker CIDR...): its flag "
                "reads are not stolen flags");
        return -EINVAL;
    }
    out->flag = malloc(flag_len + 1);
    if (!out->flag)
        return -ENOMEM;
    memcpy(out->flag, flag, flag_len);
    out->flag[flag_len] = '\0';
    out->flag_len = flag_len;
    /* As a filter of a TCP service compiles it: the flag is one more pattern of that kind. */
    rv = ctl_config_regex_lint(out->flag, false, IPPROTO_TCP, &w, why, sizeof(why));
    if (rv < 0) {
        fgx_err_set(err, errlen, "game: invalid flag format: %s", why);
        goto err;
    }
    if (w.any_stream) {
        fgx_err_set(err, errlen,
                "game: the flag format matches any stream: every connection would "
                "count as a stolen flag");
        rv = -EINVAL;
        goto err;
    }
    rv = cidrs_parse(checker, nchecker, "checker", out->checker, &out->nchecker, err, errlen);
    if (rv == 0)
        rv = cidrs_parse(team, nteam, "team", out->team, &out->nteam, err, errlen);
    if (rv < 0)
        goto err;
    return 0;
err:
    ctl_game_release(out);
    return rv < 0 ? rv : -EINVAL;
}

static int cidrs_from_msg(char **in, size_t n, struct fgx_cidr *out, size_t *nout)
{
    *nout = 0;
    for (size_t i = 0; i < n && *nout < CTL_GAME_ADDRS_MAX; i++)
        if (fgx_cidr_parse(in[i], &out[*nout]) == 0 && out[*nout].family != 0)
            (*nout)++;
    return 0;
}

int ctl_game_load(struct ctl_txn *t, struct ctl_game *out)
{
    Fgx__Ctl__GameConfig *m = NULL;
    void *buf = NULL;
    size_t len = 0;
    int rv;

    ctl_game_init(out);
    rv = ctl_store_bytes_get(t, CTL_GAME_KEY, &buf, &len);
    if (rv < 0 || !buf)
        return rv; /* absent: a store from before the game, or none set */
    m = fgx__ctl__game_config__unpack(NULL, len, buf);
    if (!m) {
        fgx_err("store: the game's record does not decode: left unset");
        rv = -EIO;
        goto out;
    }
    if (m->has_flag && m->flag.len > 0 && m->flag.len <= CTL_GAME_FLAG_MAX) {
        out->flag = malloc(m->flag.len + 1);
        if (!out->flag) {
            rv = -ENOMEM;
            goto out;
        }
        memcpy(out->flag, m->flag.data, m->flag.len);
        out->flag[m->flag.len] = '\0';
        out->flag_len = m->flag.len;
        cidrs_from_msg(m->checker, m->n_checker, out->checker, &out->nchecker);
        cidrs_from_msg(m->team, m->n_team, out->team, &out->nteam);
        out->set_time = m->has_set_time ? m->set_time : 0;
    }
out:
    if (m)
        fgx__ctl__game_config__free_unpacked(m, NULL);
    free(buf);
    return rv;
}

void ctl_game_to_msg(const struct ctl_game *g, struct ctl_game_msg *out)
{
    const struct fgx_cidr *lists[2] = {g->checker, g->team};
    size_t counts[2] = {g->nchecker, g->nteam};

    fgx__ctl__game_config__init(&out->m);
    if (!ctl_game_is_set(g))
        return;
    out->m.has_flag = true;
    out->m.flag.data = (uint8_t *)g->flag;
    out->m.flag.len = g->flag_len;
    out->m.has_set_time = g->set_time != 0;
    out->m.set_time = g->set_time;
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < counts[k]; i++) {
            if (fgx_cidr_format(&lists[k][i], out->text[k][i], sizeof(out->text[k][i])) < 0)
                out->text[k][i][0] = '\0';
            out->ptrs[k][i] = out->text[k][i];
        }
    }
    out->m.checker = out->ptrs[0];
    out->m.n_checker = counts[0];
    out->m.team = out->ptrs[1];
    out->m.n_team = counts[1];
}

int ctl_game_save(struct ctl_txn *t, const struct ctl_game *g)
{
    struct ctl_game_msg *msg;
    uint8_t *buf;
    size_t len;
    int rv;

    if (!ctl_game_is_set(g))
        return ctl_store_bytes_del(t, CTL_GAME_KEY);
    msg = malloc(sizeof(*msg));
    if (!msg)
        return -ENOMEM;
    ctl_game_to_msg(g, msg);
    len = fgx__ctl__game_config__get_packed_size(&msg->m);
    buf = malloc(len ? len : 1);
    if (!buf) {
        free(msg);
        return -ENOMEM;
    }
    fgx__ctl__game_config__pack(&msg->m, buf);
    rv = ctl_store_bytes_put(t, CTL_GAME_KEY, buf, len);
    free(buf);
    free(msg);
    return rv;
}

bool ctl_game_is_checker(const struct ctl_game *g, int family, const uint8_t *addr)
{
    for (size_t i = 0; i < g->nchecker; i++)
        if (fgx_cidr_contains(&g->checker[i], family, addr))
            return true;
    return false;
}

struct ctl_game_finder {
    hs_database_t *db;
    hs_scratch_t *scr;
};

int ctl_game_finder_new(const struct ctl_game *g, struct ctl_game_finder **out)
{
    struct ctl_game_finder *f;
    hs_compile_error_t *cerr = NULL;

    *out = NULL;
    if (!ctl_game_is_set(g))
        return 0;
    f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    if (hs_compile(g->flag, HS_FLAG_SOM_LEFTMOST, HS_MODE_BLOCK, NULL, &f->db, &cerr) !=
            HS_SUCCESS ||
        hs_alloc_scratch(f->db, &f->scr) != HS_SUCCESS) {
        /* the flag format passed the stream check; a start of match it cannot have is said
         * once here, and its flag-out events carry no hash */
        fgx_warn("game: the flag format cannot be located in excerpts (%s): flag-out events "
                 "carry no hash",
                 cerr ? cerr->message : "no scratch");
        hs_free_compile_error(cerr);
        ctl_game_finder_free(f);
        return -EINVAL;
    }
    *out = f;
    return 0;
}

void ctl_game_finder_free(struct ctl_game_finder *f)
{
    if (!f)
        return;
    hs_free_scratch(f->scr);
    hs_free_database(f->db);
    free(f);
}

struct finder_scan {
    unsigned long long end, from;
    bool found;
};

static int finder_hit(unsigned id, unsigned long long from, unsigned long long to, unsigned flags,
                      void *ctx)
{
    struct finder_scan *s = ctx;

    (void)id;
    (void)flags;
    if (to == s->end && (!s->found || from < s->from)) {
        s->from = from;
        s->found = true;
    }
    return 0;
}

int ctl_game_finder_hash(struct ctl_game_finder *f, const uint8_t *data, size_t end, char hex[65],
                         size_t *flag_len)
{
    struct finder_scan s = {.end = end};
    unsigned char sum[32];

    if (!f || end == 0)
        return -ENOENT;
    if (hs_scan(f->db, (const char *)data, (unsigned)end, 0, f->scr, finder_hit, &s) !=
            HS_SUCCESS ||
        !s.found)
        return -ENOENT;
    if (fgx_mbed_sha256(data + s.from, end - s.from, sum) != 0)
        return -EIO;
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", sum[i]);
    *flag_len = end - s.from;
    return 0;
}
