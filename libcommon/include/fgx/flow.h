/* The flow table of one packet thread: TCP flows keyed by their 5-tuple oriented client ->
 * server, so both directions of a connection find the same entry. Entries are preallocated;
 * the table is bounded and expires idle flows.
 *
 * Flows come in two classes, each with its own LRU list. An embryonic flow (a SYN-ACK anchored
 * it, no payload yet) costs nothing to lose; a flow with stream state (payload scanned, or
 * created by payload) does. Anyone can make embryonic flows (spoofed SYNs: the server answers
 * each with a SYN-ACK), so they are capped at a quarter of the table and only ever push out
 * each other: never a flow with stream state. When the table is full of flows with stream
 * state, the least recently used of those goes (fgx_flow_evicted()); the owner must then treat
 * its next segment as one whose earlier bytes it did not scan.
 *
 * An embryonic flow that is pushed out (or expires) is remembered compactly, in a direct-mapped
 * table of key hashes with both directions' start, so that the connection's first data can
 * start from its anchor as if the flow had stayed (fgx_flow_anchor_take()).
 * Not thread-safe: one table per thread (but fgx_flow_evicted() may be read from any). */
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
    /* Not open any more: blocked (both ends were reset), reset by an end, or both ends sent
     * their FIN. The entry stays until it expires, so that late segments of the connection find
     * it, but it no longer counts in its service's flows_active. */
    bool closed;
    bool fin[2]; /* [d]: this direction sent its FIN */
    /* [d]: the flow's service was away (stopped) since this direction's last segment, so its
     * bytes may have passed unseen meanwhile: its next segment must not start beyond next_seq.
     * Cleared by the first one that goes on in order. */
    bool resume[2];
    void *dbref[2];           /* the owner's reference on each direction's database */
    uint32_t cap_slot, cap_gen; /* the owner's capture of the flow (fgx/capture.h); gen 0: none */
    uint32_t sw_slot; /* the owner's script state of the flow (nfq_script.c), index + 1; 0: none */
    struct fgx_reasm dir[2];  /* [0] client -> server, [1] server -> client */
    /* table links, private */
    int32_t hnext, lprev, lnext;
    uint8_t cls; /* FGX_FLOW_EMBRYONIC or FGX_FLOW_STATEFUL */
};

/* Called when a flow leaves the table (removed, expired, evicted, table freed), before its
 * entry is reused: release what the owner attached (streams, held segments, references). */
typedef void (*fgx_flow_release_fn)(void *arg, struct fgx_flow *f);

struct fgx_flow_table;

/* Key of pkt for a flow whose client -> server direction is dir (FGX_DIR_C2S when pkt goes to the
 * server, FGX_DIR_S2C when it comes from it). */
void fgx_flow_key_from_pkt(const struct fgx_pkt *pkt, enum fgx_dir dir, struct fgx_flow_key *out);

enum { FGX_FLOW_EMBRYONIC = 0, FGX_FLOW_STATEFUL = 1 };

/* *out owned by the caller (fgx_flow_table_free()). capacity >= 1. */
int fgx_flow_table_new(size_t capacity, fgx_flow_release_fn fn, void *arg,
                       struct fgx_flow_table **out);
/* Releases every flow, then the table. NULL: no-op. */
void fgx_flow_table_free(struct fgx_flow_table *t);

/* The flow of key, marked used at now_ms; NULL when absent. */
struct fgx_flow *fgx_flow_lookup(struct fgx_flow_table *t, const struct fgx_flow_key *key,
                                 uint64_t now_ms);
/* A new flow with stream state for key (not present), zeroed but for its key, last_ms and
 * initialised reasm. When the table is full the least recently used embryonic flow is released
 * first, else the least recently used one with stream state. Never fails. */
struct fgx_flow *fgx_flow_insert(struct fgx_flow_table *t, const struct fgx_flow_key *key,
                                 uint64_t now_ms);
/* The same for an embryonic flow; at the cap of embryonic flows, or with the table full, the
 * least recently used embryonic flow goes first. NULL when the table is full of flows with
 * stream state: none of those is pushed out for it (fgx_flow_anchor_put() instead). */
struct fgx_flow *fgx_flow_insert_embryonic(struct fgx_flow_table *t, const struct fgx_flow_key *key,
                                           uint64_t now_ms);
/* f has stream state from now on (no-op if it had). */
void fgx_flow_promote(struct fgx_flow_table *t, struct fgx_flow *f);
/* Remember that key's client -> server stream starts at seq[0] and the other at seq[1], for a
 * connection that has no flow entry. */
void fgx_flow_anchor_put(struct fgx_flow_table *t, const struct fgx_flow_key *key,
                         const uint32_t seq[2]);
/* The starts remembered for key (an embryonic flow pushed out or expired, or one that found no
 * room), forgotten once taken. Returns false when none is known (never anchored, or the slot
 * taken over since). Inserting a flow for key forgets them too. */
bool fgx_flow_anchor_take(struct fgx_flow_table *t, const struct fgx_flow_key *key,
                          uint32_t seq[2]);
/* Flows with stream state pushed out of the full table, since it was created. */
uint64_t fgx_flow_evicted(const struct fgx_flow_table *t);
void fgx_flow_remove(struct fgx_flow_table *t, struct fgx_flow *f);
/* Release flows idle since before now_ms - idle_ms. Returns how many. */
size_t fgx_flow_expire(struct fgx_flow_table *t, uint64_t now_ms, uint64_t idle_ms);
/* Release every flow for which keep() returns false. Returns how many. */
size_t fgx_flow_sweep(struct fgx_flow_table *t, bool (*keep)(void *arg, struct fgx_flow *f),
                      void *arg);
size_t fgx_flow_count(const struct fgx_flow_table *t);

#endif
