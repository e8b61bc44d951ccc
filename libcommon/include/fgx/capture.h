/* Capture rings: the first bytes of each direction of a service's last connections, kept by a
 * worker's data-path thread so that a player can read what a blocked connection sent (and what
 * an honest one did) and try a regex on it. One ring per (thread, service with capture on),
 * preallocated when the ruleset turns capture on: recording a segment is a copy into a slot the
 * connection took at its first byte, never an allocation. A blocked connection's slot is pinned
 * until the worker's control thread took its capture for the block's event; the ring's writer
 * skips pinned slots. A ring's mutex is only ever contended by that control thread (a capture
 * request, an event's capture), which holds it for the copy of one slot at a time.
 * Captures travel as encoded fgx.dp.Capture messages (proto/datapath.proto). */
#ifndef FGX_CAPTURE_H
#define FGX_CAPTURE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/ruleset.h"

/* Defaults per service and worker: 128 connections x 2 x 16 KiB is 4 MiB (plus ~1.6 KiB of
 * segment marks per connection), so a worker with 10 services stays near 42 MiB, within 64. */
#define FGX_CAP_CONNS_DEFAULT 128
#define FGX_CAP_BYTES_DEFAULT 16384
#define FGX_CAP_CONNS_MAX 65536
#define FGX_CAP_BYTES_MAX (1u << 20)
/* Segment marks per direction; later segments extend the last mark (their own times are lost,
 * not their bytes). */
#define FGX_CAP_SEGS 48

struct fgx_cap_seg {
    uint32_t off, len; /* bytes [off, off + len) of the direction, kept */
    uint64_t time_ns;
    bool blocked;
};

struct fgx_cap_conn {
    uint32_t gen; /* 0: free; else the connection that holds it */
    bool pinned;  /* blocked: waits for the control thread */
    bool blocked;
    bool silent; /* blocked without a reset to the ends (a script's DROP) */
    uint8_t ipproto, family;
    uint8_t caddr[16], saddr[16];
    uint16_t cport, sport;
    uint32_t filter_id;
    uint64_t start_ns;
    uint32_t isn[2];
    bool has_isn[2];
    uint32_t len[2];    /* bytes kept from offset 0 (the highest end written) */
    uint64_t seen[2];   /* the highest end offset seen, kept or not */
    uint64_t contig[2]; /* bytes from offset 0 seen without a gap */
    uint16_t nseg[2];
    struct fgx_cap_seg seg[2][FGX_CAP_SEGS];
};

struct fgx_cap_ring {
    uint32_t service_id;
    uint32_t conns, bytes; /* slots; bytes kept per direction */
    uint32_t next;         /* the slot the next connection tries first */
    uint32_t last;         /* the slot opened last (UDP runs), conns when none */
    bool synth_seq;        /* sequence numbers made up (fgx_cap_set.synth_seq) */
    pthread_mutex_t lock;
    struct fgx_cap_conn *c;
    uint8_t *area; /* conns x 2 x bytes: slot i direction d at (2i + d) * bytes */
};

/* Where a connection's capture is: a slot and the generation it took it with. gen 0: none. */
struct fgx_cap_ref {
    uint32_t slot, gen;
};

/* *out owned by the caller (fgx_cap_ring_free()). conns 1..FGX_CAP_CONNS_MAX, bytes
 * 1..FGX_CAP_BYTES_MAX. The byte area is allocated but not touched: pages cost memory only
 * once connections fill them. Returns 0, -EINVAL or -ENOMEM. */
int fgx_cap_ring_new(uint32_t service_id, uint32_t conns, uint32_t bytes,
                     struct fgx_cap_ring **out);
void fgx_cap_ring_free(struct fgx_cap_ring *r);

/* Writer (the data-path thread): take the oldest slot that is not pinned for a new connection
 * (client caddr:cport, server saddr:sport); ref->gen stays 0 when every slot is pinned. */
void fgx_cap_open(struct fgx_cap_ring *r, uint8_t ipproto, uint8_t family, const uint8_t *caddr,
                  uint16_t cport, const uint8_t *saddr, uint16_t sport, uint64_t now_ns,
                  struct fgx_cap_ref *ref);
/* Writer: bytes of direction d (0 client->server, 1 server->client) that start at sequence
 * number seq; isn is where the direction started (taken at its first bytes). Bytes before isn
 * or past the bound are not kept; a retransmission writes the same place again. */
void fgx_cap_add(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref, int d, uint32_t isn,
                 uint32_t seq, const uint8_t *data, size_t len, uint64_t now_ns, bool blocked);
/* Writer: the same, appended after what the direction holds (no sequence numbers: UDP, the
 * proxy's byte streams). */
void fgx_cap_append(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref, int d,
                    const uint8_t *data, size_t len, uint64_t now_ns, bool blocked);
/* The client port an HTTP/2 stream's exchange is captured with (the proxy's HTTP services:
 * each exchange a connection of its own): cport for stream 1, one up for each client stream
 * after it (stream 3: cport + 1), wrapping within 1024..65535. */
uint16_t fgx_cap_stream_port(uint16_t cport, uint32_t stream);
/* Writer, UDP: the slot of the datagram run of this 4-tuple if it was the last one opened,
 * else a new one. */
void fgx_cap_udp(struct fgx_cap_ring *r, uint8_t family, const uint8_t *caddr, uint16_t cport,
                 const uint8_t *saddr, uint16_t sport, uint64_t now_ns, struct fgx_cap_ref *ref);
/* Writer: the connection was blocked by filter_id; its slot is kept until fgx_cap_take(). Returns
 * false when the ref is stale (its slot was reused). */
bool fgx_cap_pin(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref, uint32_t filter_id);
/* fgx_cap_pin() for a match that drops nothing (the game's flag leaving, issue 28): the
 * connection is kept for the event as it is so far, not marked blocked, and goes on. */
bool fgx_cap_pin_keep(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref);
/* Writer: bytes already recorded were judged after the fact (a script's REJECT or DROP, which
 * comes after the regex stage recorded them as passed): the connection is marked blocked and
 * so is every mark of direction d that holds any of the bytes [seq, seq + len), seq a sequence
 * number as fgx_cap_add() takes it (relative to where the direction started). Call it before
 * fgx_cap_pin(), so the capture the event takes carries the marks. silent: the ends were not
 * told (a DROP), so a pcap of it shows no reset. Returns false when the ref is stale. */
bool fgx_cap_block_seq(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref, int d, uint32_t seq,
                       uint32_t len, bool silent);
/* Writer: the same for the last len bytes direction d was given (fgx_cap_append()'s streams,
 * the proxy's: its judged read is the last one of its side). */
bool fgx_cap_block_tail(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref, int d, size_t len,
                        bool silent);
/* Writer: undo a pin whose event could not be queued. */
void fgx_cap_unpin(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref);

/* Reader (any thread): the pinned capture of ref, encoded into *buf (malloc'd, caller's), and
 * the slot freed. -ENOENT when the ref is stale, -ENOMEM. */
int fgx_cap_take(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref, uint8_t **buf, size_t *len);
/* Reader: every connection held now, each encoded and handed to fn (which owns the buffer).
 * Returns 0 or -ENOMEM (what was handed stays handed). */
typedef int (*fgx_cap_each_fn)(void *arg, uint8_t *buf, size_t len);
int fgx_cap_ring_collect(struct fgx_cap_ring *r, fgx_cap_each_fn fn, void *arg);

/* ---- a data-path thread's rings, one per service with capture on ---- */

struct fgx_wcfg;
struct fgx_dp_stats;

/* Changed by the owning thread at a ruleset switch, under lock, which other threads hold to
 * read; the owner reads caps without it. */
/* Rings of services that left this worker's ruleset (a layer switch moved them to the other
 * worker, or they were removed): kept for reading, so that `filter test` and `script test
 * --service` still see the captures made before a switch; taken back when the service comes
 * back with the same bounds. At most FGX_CAP_RETIRED_MAX (the oldest go first), none kept
 * past FGX_CAP_RETIRED_NS. */
#define FGX_CAP_RETIRED_MAX 8
#define FGX_CAP_RETIRED_NS (3600ull * 1000000000u)

struct fgx_cap_set {
    pthread_mutex_t lock;
    struct fgx_cap_ring **caps;
    size_t n;
    bool synth_seq; /* the rings' sequence numbers are made up (the proxy's byte streams) */
    struct fgx_cap_ring *retired[FGX_CAP_RETIRED_MAX]; /* oldest first; never written */
    uint64_t retired_ns[FGX_CAP_RETIRED_MAX];          /* CLOCK_MONOTONIC, when it left */
    size_t nretired;
};

void fgx_cap_set_init(struct fgx_cap_set *s, bool synth_seq);
void fgx_cap_set_release(struct fgx_cap_set *s);
/* Owner, at a switch to cfg: a ring for each service with capture on (its share, 1/nthreads,
 * of the service's connections), kept when its bounds did not change (or taken back from the
 * retired ones); the ring of a service no longer in cfg is retired, the others freed.
 * Allocates (not on a packet). Out of memory: left as it was, logged. */
void fgx_cap_set_switch(struct fgx_cap_set *s, const struct fgx_wcfg *cfg, unsigned nthreads);
/* Owner: the ring of service id, or NULL (capture off). */
struct fgx_cap_ring *fgx_cap_set_ring(const struct fgx_cap_set *s, uint32_t id);
/* Control thread: the captures of the events [from, to) of out (drained from this thread's
 * event ring), taken from their pinned slots. */
void fgx_cap_set_events(struct fgx_cap_set *s, struct fgx_dp_stats *out, size_t from, size_t to);
/* Control thread: every capture of service id, added to *caps / *n (a malloc'd array grown as
 * needed, *cap its room). Returns 0 or -ENOMEM. */
int fgx_cap_set_collect(struct fgx_cap_set *s, uint32_t id, struct fgx_blob **caps, size_t *n,
                        size_t *cap);

/* ---- a capture, decoded (controld, fgexctl) ---- */
struct fgx_cap {
    uint32_t service_id;
    uint8_t ipproto, family;
    uint8_t caddr[16], saddr[16];
    uint16_t cport, sport;
    uint64_t start_ns;
    uint32_t isn[2];
    const uint8_t *data[2]; /* into the decoded message */
    size_t len[2];
    uint64_t seen[2];
    size_t nseg;
    struct fgx_cap_seg *seg; /* malloc'd; dir in seg_dir */
    uint8_t *seg_dir;        /* malloc'd: 0 or 1 per segment */
    bool blocked, synth_seq;
    bool silent; /* blocked without a reset (fgx_cap_block_seq()) */
    uint32_t filter_id;
    uint64_t event_seq;
    void *msg; /* the decoded message, owned */
};

/* Decode buf (the caller keeps it). *out released by fgx_cap_release(). -EINVAL when it is not
 * a capture. */
int fgx_cap_decode(const void *buf, size_t len, struct fgx_cap *out);
void fgx_cap_release(struct fgx_cap *c);
/* Re-encode buf with event_seq set (controld, for what it hands out). *out malloc'd. */
int fgx_cap_set_event_seq(const void *buf, size_t len, uint64_t seq, uint8_t **out, size_t *outlen);

#endif
