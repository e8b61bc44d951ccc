/* controld's state: services, filters, counters and compiled databases in one LMDB environment
 * under the state directory. Every change a request makes happens in one write transaction, so
 * a request either lands whole or not at all. */
#ifndef CTL_STORE_H
#define CTL_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld/ctl_health.h"
#include "fgx/addr.h"
#include "fgx/dp.h"
#include "fgx/ruleset.h"
#include "fgx/svcaddr.h"

#define CTL_NAME_MAX 63
#define CTL_STORE_MAPSIZE_DEFAULT (1ull << 30)

enum ctl_layer {
    CTL_LAYER_NFQUEUE = 0,
    CTL_LAYER_PROXY = 1,
    CTL_LAYER_EXTERNAL = 2, /* handed to the team's own proxy (ext_to), no worker */
};

/* A service's addresses: enough for a box's interfaces and a few networks, small enough that a
 * service stays a plain value copied whole. */
#define CTL_SERVICE_ADDRS_MAX 32

/* Bounds of a service's own limits (issue 27): the proxy's own --max-conns bound, a day. */
#define CTL_SERVICE_MAX_CONNS_MAX 1000000u
#define CTL_SERVICE_FIRST_BYTE_MAX 86400u

struct ctl_service {
    uint32_t id;
    char name[CTL_NAME_MAX + 1];
    uint8_t ipproto; /* IPPROTO_TCP or IPPROTO_UDP */
    /* The first address (addrs[0]'s port and prefix, family 0 for an interface): what the
     * one-address form --ip/--port shows and sets. Kept equal by ctl_service_addrs_sync(). */
    uint16_t port;
    struct fgx_cidr addr;
    struct fgx_svcaddr addrs[CTL_SERVICE_ADDRS_MAX]; /* every address, in the order added */
    size_t naddrs;                                   /* 1.. */
    struct fgx_svcaddr ext_to; /* layer external: the team's proxy, a host address and port */
    enum ctl_layer layer;
    bool active;
    bool fail_open;
    uint8_t midstream; /* FGX_MIDSTREAM_RESET (also for records stored before it) or _SCAN */
    uint64_t created; /* unix seconds */
    /* TLS termination (proxy layer): its certificate and key are stored apart
     * (ctl_store_tls_get()); upstream_plain: plaintext to the service. */
    bool tls;
    bool upstream_plain;
    /* The HTTP service kind (--proto http; proxy layer, TCP): HTTP/2 terminated by the proxy,
     * each stream filtered as HTTP/1.1 (issue 26). */
    bool http;
    /* ... toward a service that speaks HTTP/1.1 only (--upstream http1): each stream sent
     * to it as an HTTP/1.1 request (proxyworker/px_h2.c). */
    bool upstream_http1;
    /* Capture (fgx/capture.h): on unless capture_off; 0 bounds: the defaults. */
    bool capture_off;
    uint32_t capture_conns, capture_bytes;
    /* Limits of its own (issue 27; proxy layer): connections open at once (0: none), what one
     * past it gets (forwarded, counted, or refused), the first-byte timeout in seconds (0: the
     * proxy's). Records stored before them decode as 0, false, 0. */
    uint32_t max_conns;
    bool over_limit_forward;
    uint32_t first_byte_timeout;
};

/* A TLS service's certificate chain and key, PEM (malloc'd; ctl_tls_pem_release()). */
struct ctl_tls_pem {
    uint8_t *cert, *key;
    size_t cert_len, key_len;
};

/* port/addr from addrs[0] (after the list changed). */
static inline void ctl_service_addrs_sync(struct ctl_service *s)
{
    if (s->naddrs == 0)
        return;
    s->port = s->addrs[0].port;
    s->addr = s->addrs[0].cidr;
}

/* The list from the one address port/addr (a record from before the list, --ip/--port). */
static inline void ctl_service_addrs_single(struct ctl_service *s)
{
    struct fgx_svcaddr one = {.cidr = s->addr, .port = s->port};

    s->addrs[0] = one;
    s->naddrs = 1;
}

struct ctl_filter {
    uint32_t id;
    uint32_t service_id;
    char *regex; /* malloc'd, owned by the struct (ctl_filter_release()) */
    enum fgx_dir dir;
    bool nocase;
    bool active;
    uint64_t created;
    bool log;    /* action log: matches are recorded, nothing is dropped */
    char *label; /* malloc'd or NULL (no label), owned like regex; fgx_label_check()ed */
    uint32_t revision; /* edits of its regex, direction or case (filter set); 0: never */
    uint64_t edited;   /* unix seconds of the last edit; 0: never */
};

struct ctl_store;
struct ctl_txn;

/* Open (creating the directory and the environment when needed). mapsize 0 gives
 * CTL_STORE_MAPSIZE_DEFAULT; tests pass a tiny one to provoke a full map. *out owned by the
 * caller (ctl_store_close()). */
int ctl_store_open(const char *dir, size_t mapsize, struct ctl_store **out);
void ctl_store_close(struct ctl_store *s);

/* A transaction; only one at a time per store (controld is single-threaded). *out is released
 * by exactly one of ctl_txn_commit() or ctl_txn_abort(). ctl_txn_commit() returns -EFBIG when
 * the map is full, -ENOSPC (or -EDQUOT) when the disk is; the transaction is gone either way
 * and the store keeps what it had. */
int ctl_txn_begin(struct ctl_store *s, bool write, struct ctl_txn **out);
int ctl_txn_commit(struct ctl_txn *t);
void ctl_txn_abort(struct ctl_txn *t);

/* ---- a store short of room (issue 24) ----
 * A write refused for want of room (the LMDB map or the disk full: -EFBIG, -ENOSPC, -EDQUOT)
 * starts a spell of degraded health, noted in the health log (ctl_health.h) and shown by
 * status; the next write that succeeds ends it, but a spell the background writer began (the
 * events' and counters' flush, which retries by itself) ends only with its own success. */
struct ctl_store_health {
    bool degraded;
    int err;           /* the last refusal's negative errno */
    uint64_t since;    /* unix seconds of the spell's first refusal */
    uint64_t failures; /* writes refused in the spell */
    char what[64];     /* what the last refused write was */
};
void ctl_store_health_get(const struct ctl_store *s, struct ctl_store_health *out);
/* A refusal for want of room in a few words: "the disk is full", "the LMDB map is full". */
const char *ctl_store_space_text(int err);
/* What the write transaction t does, for the health record (what is borrowed, a literal;
 * default "a change"); background: the events' and counters' flush. */
void ctl_txn_label(struct ctl_txn *t, const char *what, bool background);
/* The reserve: a file of CTL_STORE_RESERVE bytes beside the store, made by
 * ctl_store_reserve_start() (controld calls it once the store is open; again when a spell ends,
 * if it could not be made), so that at a stop on a full disk the events and counters still
 * in memory have room: ctl_store_reserve_release() deletes it. Returns true when there was one.
 * ctl_store_reserve_held(): whether one is in place now. */
#define CTL_STORE_RESERVE (1u << 20)
void ctl_store_reserve_start(struct ctl_store *s);
bool ctl_store_reserve_release(struct ctl_store *s);
bool ctl_store_reserve_held(const struct ctl_store *s);

/* Services. _put with id 0 allocates the next id (and sets created); names and (proto, port)
 * must be unique: -EEXIST otherwise. Lookups return -ENOENT quietly. _del removes the
 * service's filters and their counters too. _list: *out malloc'd (free()), ordered by id. */
int ctl_store_service_get(struct ctl_txn *t, uint32_t id, struct ctl_service *out);
int ctl_store_service_by_name(struct ctl_txn *t, const char *name, struct ctl_service *out);
int ctl_store_service_put(struct ctl_txn *t, struct ctl_service *svc);
int ctl_store_service_del(struct ctl_txn *t, uint32_t id);
int ctl_store_service_list(struct ctl_txn *t, struct ctl_service **out, size_t *n);
/* Only the service's record: its filters and counters stay, for a _put of the same id in the
 * same transaction (an import that keeps the service). */
int ctl_store_service_del_record(struct ctl_txn *t, uint32_t id);

/* A service's TLS certificate and key, kept in the store (a file of mode 0600 in a directory of
 * mode 0700: root's only). _get: -ENOENT when none. _del: none is not an error. */
int ctl_store_tls_get(struct ctl_txn *t, uint32_t service_id, struct ctl_tls_pem *out);
int ctl_store_tls_put(struct ctl_txn *t, uint32_t service_id, const struct ctl_tls_pem *p);
int ctl_store_tls_del(struct ctl_txn *t, uint32_t service_id);
/* Frees (the key wiped first); NULL and an empty one are no-ops. */
void ctl_tls_pem_release(struct ctl_tls_pem *p);

/* Filters. _put with id 0 allocates the next id; the service must exist (-ENOENT). _list with
 * service_id 0 lists every filter; *out released with ctl_filters_free(). */
int ctl_store_filter_get(struct ctl_txn *t, uint32_t id, struct ctl_filter *out);
int ctl_store_filter_put(struct ctl_txn *t, struct ctl_filter *f);
int ctl_store_filter_del(struct ctl_txn *t, uint32_t id);
int ctl_store_filter_list(struct ctl_txn *t, uint32_t service_id, struct ctl_filter **out,
                          size_t *n);
void ctl_filter_release(struct ctl_filter *f);
/* The id f is compiled under (fgx_pattern.filter_id): its id and revision (FGX_FILTER_ID_REV),
 * with FGX_FILTER_ID_LOG when log. */
static inline uint32_t ctl_filter_hs_id(const struct ctl_filter *f)
{
    uint32_t id = f->id | ((f->revision << FGX_FILTER_ID_REV_SHIFT) & FGX_FILTER_ID_REV);

    return f->log ? (id | FGX_FILTER_ID_LOG) : id;
}
void ctl_filters_free(struct ctl_filter *fs, size_t n);

/* Persisted per-filter blocked totals (0 when never counted). */
int ctl_store_blocked_get(struct ctl_txn *t, uint32_t filter_id, uint64_t *out);
int ctl_store_blocked_add(struct ctl_txn *t, uint32_t filter_id, uint64_t delta);

/* Persisted per-service traffic totals (all 0 when never counted); removed with the service. */
struct ctl_svc_totals {
    uint64_t packets, bytes, accepted, dropped;
};
int ctl_store_svc_totals_get(struct ctl_txn *t, uint32_t service_id, struct ctl_svc_totals *out);
int ctl_store_svc_totals_put(struct ctl_txn *t, uint32_t service_id,
                             const struct ctl_svc_totals *v);
/* Set a filter's blocked total outright (the statistics stage keeps the running total). */
int ctl_store_blocked_set(struct ctl_txn *t, uint32_t filter_id, uint64_t v);
/* A log filter's matched total, the same way (0 when never counted); removed with the filter. */
int ctl_store_matched_get(struct ctl_txn *t, uint32_t filter_id, uint64_t *out);
int ctl_store_matched_set(struct ctl_txn *t, uint32_t filter_id, uint64_t v);
/* A named 64-bit counter in the meta db (0 when absent): the next event seq, worker totals. */
int ctl_store_u64_get(struct ctl_txn *t, const char *name, uint64_t *out);
int ctl_store_u64_put(struct ctl_txn *t, const char *name, uint64_t v);

/* One block as controld keeps and reports it (control.proto Event). */
#define CTL_ADDR_TEXT_MAX 46 /* INET6_ADDRSTRLEN */
struct ctl_event {
    uint64_t seq;     /* from 1, increasing, never reused */
    uint64_t time_ns; /* unix time of the block */
    uint32_t service_id, filter_id;
    char service[CTL_NAME_MAX + 1]; /* name when it was reported; "" when unknown */
    uint8_t dir;                    /* FGX_DIR_C2S or FGX_DIR_S2C */
    uint8_t ipproto;                /* IPPROTO_TCP or IPPROTO_UDP */
    char src[CTL_ADDR_TEXT_MAX], dst[CTL_ADDR_TEXT_MAX];
    uint16_t sport, dport;
    uint8_t excerpt_len;
    uint8_t match_end; /* the match ends before excerpt[match_end] (<= excerpt_len) */
    uint8_t excerpt[FGX_DP_EXCERPT_MAX];
    bool log; /* a log filter's match: nothing was dropped */
    /* A script's event (filter_id 0): a call's failure, "timeout" or "exception", or a block
     * by a function, "reject" or "drop" (a block like a filter's: in --top and in the
     * service's blocked total), and the function (cut at 63 bytes: the ring holds
     * --events-keep of these); "" for a filter's match. */
    char script_kind[10];
    char script_fn[64];
    uint32_t h2_stream; /* the HTTP/2 stream whose rendering matched; 0: not one */
    uint8_t edge;       /* the edge the client came by (enum fgx_edge); 0: its address named none */
    char flag_sha256[65]; /* a flag-out's flag (issue 28): its SHA-256 in hex; "": unknown */
    uint64_t flag_offset; /* ... its first byte's offset in the s2c stream; 0 with no hash */
};

/* Events keyed by seq. _list gives the newest `newest` events, oldest first (*out malloc'd,
 * free()); _trim deletes all but the newest `keep`. */
int ctl_store_event_put(struct ctl_txn *t, const struct ctl_event *e);
int ctl_store_event_list(struct ctl_txn *t, size_t newest, struct ctl_event **out, size_t *n);
int ctl_store_event_trim(struct ctl_txn *t, size_t keep);

/* Blocked connections' captures (encoded fgx.dp.Capture), by their event's seq. get: *data
 * malloc'd (caller's), -ENOENT when none. each: newest first; fn's data is valid during the
 * call only; a nonzero return stops (a positive one is not an error). trim: keep the newest. */
int ctl_store_capture_put(struct ctl_txn *t, uint64_t seq, const void *data, size_t len);
int ctl_store_capture_get(struct ctl_txn *t, uint64_t seq, void **data, size_t *len);
typedef int (*ctl_store_capture_fn)(void *arg, uint64_t seq, const void *data, size_t len);
int ctl_store_capture_each(struct ctl_txn *t, ctl_store_capture_fn fn, void *arg);
int ctl_store_capture_trim(struct ctl_txn *t, size_t keep);

/* A named text setting in the meta db (the password hash): _get gives "" when absent and
 * -EOVERFLOW when the value does not fit in len bytes with its NUL. */
int ctl_store_text_get(struct ctl_txn *t, const char *name, char *out, size_t len);
int ctl_store_text_put(struct ctl_txn *t, const char *name, const char *v);
/* A named binary record in the meta db (the firewall's configuration): _get gives a malloc'd
 * copy (*len 0 and *out NULL when absent; free()), _del removes it (absent: 0). */
int ctl_store_bytes_get(struct ctl_txn *t, const char *name, void **out, size_t *len);
int ctl_store_bytes_put(struct ctl_txn *t, const char *name, const void *v, size_t len);
int ctl_store_bytes_del(struct ctl_txn *t, const char *name);
/* Make the ids allocated from now on greater than these (an import keeps its ids). */
int ctl_store_ids_reserve(struct ctl_txn *t, uint32_t service_id, uint32_t filter_id);

/* Ruleset generations, persisted so that they only ever grow, even across restarts. */
int ctl_store_generation_next(struct ctl_txn *t, uint64_t *out);

/* Compiled-database cache keyed by fgx_ruleset_key(). _get copies into out (caller owns,
 * fgx_blob_release()), -ENOENT on a miss. _keep deletes every entry whose key is not listed. */
int ctl_store_dbcache_get(struct ctl_txn *t, uint64_t key, struct fgx_blob *out);
int ctl_store_dbcache_put(struct ctl_txn *t, uint64_t key, const struct fgx_blob *b);
int ctl_store_dbcache_keep(struct ctl_txn *t, const uint64_t *keys, size_t n);

/* Blocks of a service's removed filters, kept in its blocked total (0 when none); removed with
 * the service. */
int ctl_store_retired_get(struct ctl_txn *t, uint32_t service_id, uint64_t *out);
int ctl_store_retired_set(struct ctl_txn *t, uint32_t service_id, uint64_t v);

/* The change history (ctl_history.c): packed control.proto Change records by seq. _get and
 * _seqs give malloc'd copies (free()); _seqs ascending. */
int ctl_store_history_put(struct ctl_txn *t, uint64_t seq, const void *data, size_t len);
int ctl_store_history_get(struct ctl_txn *t, uint64_t seq, void **out, size_t *len);
int ctl_store_history_seqs(struct ctl_txn *t, uint64_t **out, size_t *n);
int ctl_store_history_del(struct ctl_txn *t, uint64_t seq);

/* Per-minute rates (ctl_rates.c), one record per series, keyed by CTL_RATES_KEY_LEN bytes;
 * _put with len 0 deletes. _get: -ENOENT when absent, else a malloc'd copy (free()). */
#define CTL_RATES_KEY_LEN 6
int ctl_store_rates_get(struct ctl_txn *t, const uint8_t key[CTL_RATES_KEY_LEN], void **out,
                        size_t *len);
int ctl_store_rates_put(struct ctl_txn *t, const uint8_t key[CTL_RATES_KEY_LEN], const void *data,
                        size_t len);
int ctl_store_rates_keys(struct ctl_txn *t, uint8_t (**out)[CTL_RATES_KEY_LEN], size_t *n);

/* Text for a store error code, for replies ("state store full: ..."). */
const char *ctl_store_strerror(int err);

/* Script filter files: one opaque record per service (controld/ctl_script.c encodes it),
 * removed with the service. _get: *data malloc'd (free()); -ENOENT quietly when the service has
 * none. _ids: the services that have one, ascending; *ids malloc'd. */
int ctl_store_script_get(struct ctl_txn *t, uint32_t service_id, void **data, size_t *len);
int ctl_store_script_put(struct ctl_txn *t, uint32_t service_id, const void *data, size_t len);
int ctl_store_script_del(struct ctl_txn *t, uint32_t service_id);
int ctl_store_script_ids(struct ctl_txn *t, uint32_t **ids, size_t *n);

/* The health log (ctl_health.h), keyed by (service id, seq) so that each service's entries, and
 * the box's (service 0), are bounded apart. _list: every entry, seq ascending (*out malloc'd,
 * free()); _trim: keep the newest `keep` of one service. */
int ctl_store_health_put(struct ctl_txn *t, const struct ctl_health_entry *e);
int ctl_store_health_list(struct ctl_txn *t, struct ctl_health_entry **out, size_t *n);
int ctl_store_health_trim(struct ctl_txn *t, uint32_t service_id, size_t keep);

#endif
