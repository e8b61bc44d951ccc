/* controld control API, the game family (issue 28): game set replaces the game's facts whole
 * (the flag format, the checker's and the teams' addresses), game show reports them. Backups
 * carry them through ctl_rpc_game_export/import (ctl_game.c checks and stores). */
#include "controld/ctl_rpc_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controld/ctl_game.h"
#include "controld/ctl_stats.h"
#include "fgx/log.h"

/* What a reply points into, freed with the request (ctl_rpc_game_release()). */
struct ctl_rpc_game {
    struct ctl_game game;
    struct ctl_game_msg msg;
};

static struct ctl_rpc_game *rpc_game(struct ctl_rpc *r)
{
    if (!r->game) {
        r->game = calloc(1, sizeof(*r->game));
        if (r->game)
            ctl_game_init(&r->game->game);
    }
    return r->game;
}

void ctl_rpc_game_release(struct ctl_rpc *r)
{
    if (!r->game)
        return;
    ctl_game_release(&r->game->game);
    free(r->game);
    r->game = NULL;
}

static void reply_game(struct ctl_rpc *r, struct ctl_rpc_game *g)
{
    ctl_game_to_msg(&g->game, &g->msg);
    r->reply.game = &g->msg.m;
}

static void do_game_show(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    struct ctl_rpc_game *g = rpc_game(r);
    struct ctl_txn *t;
    int rv;

    (void)q;
    if (!g) {
        ctl_rpc_store_fail(r, -ENOMEM);
        return;
    }
    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    rv = ctl_game_load(t, &g->game);
    ctl_txn_abort(t);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        return;
    }
    reply_game(r, g);
}

static void do_game_set(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__GameSet *s = q->game_set;
    struct ctl_rpc_game *g = rpc_game(r);
    struct ctl_txn *t = NULL;
    char err[768], what[160];
    int rv;

    if (!g) {
        ctl_rpc_store_fail(r, -ENOMEM);
        return;
    }
    if (!s) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "game set: nothing given");
        return;
    }
    if (!(s->has_clear && s->clear)) {
        rv = ctl_game_parse(s->has_flag ? s->flag.data : NULL, s->has_flag ? s->flag.len : 0,
                            s->checker, s->n_checker, s->team, s->n_team, &g->game, err,
                            sizeof(err));
        if (rv < 0) {
            ctl_rpc_fail(r, ctl_rpc_config_code(rv), "%s", err);
            return;
        }
        g->game.set_time = (uint64_t)time(NULL);
    } else if (s->has_flag || s->n_checker || s->n_team) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "game set: --clear takes nothing else");
        return;
    }
    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    ctl_txn_label(t, "the game's settings", false);
    rv = ctl_game_save(t, &g->game);
    if (rv < 0) {
        ctl_txn_abort(t);
        ctl_rpc_store_fail(r, rv);
        return;
    }
    /* Every TCP service's s2c database gains (or loses) the flag format: rebuilt, applied. */
    ctl_rpc_finish(r, &t, true);
    if (t)
        ctl_txn_abort(t); /* not committed: refused, or deferred for the compiler */
    if (r->deferred || (ctl_rpc_failed(r) && r->reply.code != FGX__CTL__CODE__CODE_UNAVAILABLE))
        return;
    if (r->ctx->stats)
        ctl_stats_game_set(r->ctx->stats, &g->game);
    if (ctl_game_is_set(&g->game))
        snprintf(what, sizeof(what),
                 "game set: a flag format of %zu bytes, %zu checker and %zu "
                 "team addresses",
                 g->game.flag_len, g->game.nchecker, g->game.nteam);
    else
        snprintf(what, sizeof(what), "game set --clear");
    ctl_rpc_history_setting(r, q, what);
    fgx_info("%s", what);
    reply_game(r, g);
}

int ctl_rpc_game_export(struct ctl_rpc *r, struct ctl_txn *t, Fgx__Ctl__Config *cfg)
{
    struct ctl_rpc_game *g = rpc_game(r);
    int rv;

    if (!g)
        return -ENOMEM;
    rv = ctl_game_load(t, &g->game);
    if (rv < 0)
        return rv;
    ctl_game_to_msg(&g->game, &g->msg);
    cfg->game = &g->msg.m; /* an empty message when none is set: the import clears it */
    return 0;
}

int ctl_rpc_game_import(struct ctl_rpc *r, struct ctl_txn *t, const Fgx__Ctl__Config *cfg,
                        char *err, size_t len)
{
    const Fgx__Ctl__GameConfig *m = cfg->game;
    struct ctl_game game;
    int rv;

    if (!m)
        return 0; /* an older backup: the game stays as it is */
    ctl_game_init(&game);
    if (m->has_flag && m->flag.len > 0) {
        rv = ctl_game_parse(m->flag.data, m->flag.len, m->checker, m->n_checker, m->team, m->n_team,
                            &game, err, len);
        if (rv < 0)
            return rv;
        game.set_time = m->has_set_time ? m->set_time : (uint64_t)time(NULL);
    }
    rv = ctl_game_save(t, &game);
    ctl_game_release(&game);
    if (rv == 0)
        r->game_imported = true;
    return rv;
}

void ctl_rpc_game_imported(struct ctl_rpc *r)
{
    struct ctl_game g;
    struct ctl_txn *t;

    if (!r->game_imported || !r->ctx->stats)
        return;
    r->game_imported = false;
    if (ctl_txn_begin(r->ctx->store, false, &t) < 0)
        return;
    if (ctl_game_load(t, &g) == 0)
        ctl_stats_game_set(r->ctx->stats, &g);
    ctl_txn_abort(t);
    ctl_game_release(&g);
}

const struct ctl_rpc_cmd ctl_rpc_game_cmds[] = {
    {FGX__CTL__REQUEST__REQ_GAME_SET, do_game_set, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_GAME_SHOW, do_game_show, 0},
    {0, NULL, 0},
};
