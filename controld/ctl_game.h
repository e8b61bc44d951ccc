/* The game's facts (issue 28): the flag format and the game's checker and team addresses, set
 * once by `fgexctl game set` (or controld's --game-* options) and kept in the store as one
 * record, so that the statistics can tell the checker's flag reads from stolen flags. The model
 * only: parse, check, store, load; no worker learns of it here. */
#ifndef CTL_GAME_H
#define CTL_GAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control.pb-c.h"
#include "controld/ctl_store.h"
#include "fgx/addr.h"
#include "fgx/ruleset.h"

#define CTL_GAME_ADDRS_MAX 64  /* checker or team prefixes, each */
#define CTL_GAME_FLAG_MAX 1024 /* the flag regex's bytes */
#define CTL_GAME_KEY "game"    /* its record in the store's meta db */
/* The hyperscan id of the flag format in each TCP service's s2c database: a log filter's id
 * (it never drops; SINGLEMATCH reports it once per connection) that no filter is given: filter
 * ids count up from 1 and stay below it (the largest FGX_FILTER_ID_MASK leaves, under the
 * bits of an edit's revision, FGX_FILTER_ID_REV). */
#define CTL_GAME_FLAG_ID FGX_FILTER_ID_MASK

struct ctl_game {
    /* The flag regex, as given (malloc'd, NUL-terminated, no NUL inside; NULL: no game). */
    char *flag;
    size_t flag_len;
    struct fgx_cidr checker[CTL_GAME_ADDRS_MAX], team[CTL_GAME_ADDRS_MAX];
    size_t nchecker, nteam;
    uint64_t set_time; /* unix seconds of the set; 0 when none */
};

void ctl_game_init(struct ctl_game *g);
void ctl_game_release(struct ctl_game *g);
static inline bool ctl_game_is_set(const struct ctl_game *g)
{
    return g->flag != NULL;
}

/* From a message's parts (game set, a backup, controld's options): flag's bytes (a regex
 * hyperscan accepts for a TCP stream, that cannot match every stream, at most CTL_GAME_FLAG_MAX
 * bytes, no NUL) and the CIDRs (at least one checker). 0, or -EINVAL with the reason in err;
 * out is then released. */
int ctl_game_parse(const uint8_t *flag, size_t flag_len, char *const *checker, size_t nchecker,
                   char *const *team, size_t nteam, struct ctl_game *out, char *err, size_t errlen);
/* The stored game (none stored: not set, as a store from before the game loads). */
int ctl_game_load(struct ctl_txn *t, struct ctl_game *out);
/* Store g (not set: the record is removed). */
int ctl_game_save(struct ctl_txn *t, const struct ctl_game *g);

/* g as a message; its strings and bytes point into buf (text of the CIDRs) and g, which must
 * outlive m. m->checker/team point into ptrs. */
struct ctl_game_msg {
    Fgx__Ctl__GameConfig m;
    char text[2][CTL_GAME_ADDRS_MAX][64];
    char *ptrs[2][CTL_GAME_ADDRS_MAX];
};
void ctl_game_to_msg(const struct ctl_game *g, struct ctl_game_msg *out);

/* The flag's own bytes in an event's excerpt: the stream scan reports where a match ends, not
 * where it starts, so controld finds the start again with a block-mode database of the flag
 * format compiled with leftmost start of match. _new: *out owned by the caller
 * (ctl_game_finder_free(); NULL and a game not set give NULL). _hash: the SHA-256, in
 * lower-case hex, of the leftmost flag that ends exactly at end in data (end bytes), and its
 * length in *flag_len; -ENOENT
 * when none does (a flag longer than the excerpt's bytes before the match). */
struct ctl_game_finder;
int ctl_game_finder_new(const struct ctl_game *g, struct ctl_game_finder **out);
void ctl_game_finder_free(struct ctl_game_finder *f);
int ctl_game_finder_hash(struct ctl_game_finder *f, const uint8_t *data, size_t end, char hex[65],
                         size_t *flag_len);

/* Whether an address (family 4 or 6, in network order) is the checker's. */
bool ctl_game_is_checker(const struct ctl_game *g, int family, const uint8_t *addr);

#endif
