/* The flow table of one packet thread: TCP flows keyed by their 5-tuple oriented client ->
 * server, so both directions of a connection find the same entry. Entries are preallocated;
 * the table is bounded, evicts the least recently used flow when full and expires idle ones.
 * Not thread-safe: one table per thread. */
#ifndef FGX_FLOW_H
#define FGX_FLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/pkt.h"
#include "fgx/reasm.h"
#include "fgx/ruleset.h"

struct fgx_flow_key {
    uint8_t family, ipproto;
    uint16_t cport, sport; /* client and server ports */
    uint16_t pad;          /* always zero: keys are hashed and compared as bytes */
    uint8_t caddr[16], saddr[16];
};

struct fgx_flow {
    struct fgx_flow_key key;
    uint64_t last_ms;
    uint32_t service_id;
    bool blocked;
    /* [d]: the flow's service was away (stopped) since this direction's last segment, so its
     * bytes may have passed unseen meanwhile: its next segment must not start beyond next_seq.
     * Cleared by the first one that goes on in order. */
    bool resume[2];
    void *dbref[2];           /* the owner's reference on each direction's database */
    struct fgx_reasm dir[2];  /* [0] client -> server, [1] server -> client */
    /* table links, private */
    int32_t hnext, lprev, lnext;
};

/* Called when a flow leaves the table (removed, expired, evicted, table freed), before its
 * entry is reused: release what the owner attached (streams, held segments, references). */
typedef void (*fgx_flow_release_fn)(void *arg, struct fgx_flow *f);

struct fgx_flow_table;

/* Key of pkt for a flow whose client -> server direction is dir (FGX_DIR_C2S when pkt goes to the
 * server, FGX_DIR_S2C when it comes from it). */
void fgx_flow_key_from_pkt(const struct fgx_pkt *pkt, enum fgx_dir dir, struct fgx_flow_key *out);

/* *out owned by the caller (fgx_flow_table_free()). capacity >= 1. */
int fgx_flow_table_new(size_t capacity, fgx_flow_release_fn fn, void *arg,
                       struct fgx_flow_table **out);
/* Releases every flow, then the table. NULL: no-op. */
void fgx_flow_table_free(struct fgx_flow_table *t);

/* The flow of key, marked used at now_ms; NULL when absent. */
struct fgx_flow *fgx_flow_lookup(struct fgx_flow_table *t, const struct fgx_flow_key *key,
                                 uint64_t now_ms);
/* A new flow for key (not present), zeroed but for its key, last_ms and initialised reasm.
 * When the table is full the least recently used flow is released first. Never fails. */
struct fgx_flow *fgx_flow_insert(struct fgx_flow_table *t, const struct fgx_flow_key *key,
                                 uint64_t now_ms);
void fgx_flow_remove(struct fgx_flow_table *t, struct fgx_flow *f);
/* Release flows idle since before now_ms - idle_ms. Returns how many. */
size_t fgx_flow_expire(struct fgx_flow_table *t, uint64_t now_ms, uint64_t idle_ms);
/* Release every flow for which keep() returns false. Returns how many. */
size_t fgx_flow_sweep(struct fgx_flow_table *t, bool (*keep)(void *arg, struct fgx_flow *f),
                      void *arg);
size_t fgx_flow_count(const struct fgx_flow_table *t);

#endif
