/* libFuzzer harness: TCP reassembly (libcommon/reasm.c) fed a sequence of crafted segments of one
 * direction, the way an attacker shapes them: out of order, overlapping, retransmitted with other
 * bytes, before the start, past the hold bounds, with acknowledgements and expiries between.
 *
 * The oracle is a model of the receiver: it reads only segments fgex accepted (at once, or
 * later through the verdict callback), in order, keeping the first copy of each byte, and it
 * has already taken every byte it acknowledged. Two things must hold after every step:
 *   1. every byte the receiver could take from an accepted segment, at or above what it
 *      acknowledged, is the byte fgex scanned at that place (accepted bytes that differ from
 *      the stream fgex scanned, or lie beyond it, are an evasion);
 *   2. the stream the receiver reads never holds the blocked pattern unless fgex reported the
 *      match (and then the flow is over, as the worker drops it from then on).
 *
 * Input: one byte of set-up (bit 0: the sequence space starts just below 2^32, so it wraps;
 * bits 1-2: how much the keep pool holds), then records: op (1 byte), a 16-bit offset, a length
 * byte and that many payload bytes. ops: 0-3 a segment at that offset from the start (op 3: the
 * offset is signed, so before the start), 4 an acknowledgement, 5 time passes and held segments
 * expire. */
#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hs/hs.h>

#include "fgx/reasm.h"
#include "fuzz_reasm_ctx.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define STREAM_MAX (1u << 17)

struct seg {
    int32_t rel; /* offset from the start of the direction */
    uint16_t len;
    uint8_t data[255];
};

static struct seg segs[MAXSEG];
static uint8_t stream[STREAM_MAX]; /* what the receiver read, in order */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    reasm_ctx_setup("fuzz_reasm");
    return 0;
}

struct model {
    uint32_t len;   /* bytes read in order */
    uint32_t acked; /* bytes acknowledged (<= len) */
};

/* The receiver takes an accepted segment: check 1 above, and extend what it read. */
static void take(struct model *mo, const struct seg *s)
{
    for (uint32_t i = 0; i < s->len; i++) {
        int64_t p = (int64_t)s->rel + i;

        if (p < (int64_t)mo->acked)
            continue; /* before the start, or already in the receiver's hands */
        if (p < (int64_t)mo->len) {
            assert(stream[p] == s->data[i] && "accepted byte differs from the scanned stream");
            continue;
        }
        assert(p == (int64_t)mo->len && "accepted byte beyond the scanned stream");
        if (mo->len == STREAM_MAX)
            return;
        stream[mo->len++] = s->data[i];
    }
}

static bool has_pattern(const struct model *mo)
{
    return memmem(stream, mo->len, PATTERN, sizeof(PATTERN) - 1) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fgx_reasm_ctx *ctx;
    struct fgx_reasm r;
    struct model mo = {0, 0};
    uint32_t isn;
    uint64_t now = 1000;
    size_t at = 1, nseg = 0;
    bool matched = false;

    if (size < 1)
        return 0;
    isn = (data[0] & 1) ? 0xffffff00u : 1000u;
    ctx = ctxs[(data[0] >> 1) & 3];
    fgx_reasm_init(&r);
    assert(fgx_reasm_start(ctx, &r, isn) == 0);
    assert(fgx_reasm_set_db(ctx, &r, db, 1) == 0);

    while (!matched && at + 4 <= size && nseg < MAXSEG) {
        uint8_t op = data[at] % 6;
        uint16_t off = (uint16_t)(data[at + 1] | data[at + 2] << 8);
        uint8_t len = data[at + 3];

        at += 4;
        if (op <= 3) {
            struct seg *s = &segs[nseg];
            struct fgx_reasm_match m;
            enum fgx_reasm_verdict v;

            if (len > size - at)
                len = (uint8_t)(size - at);
            s->rel = op == 3 ? (int16_t)off : (int32_t)off;
            s->len = len;
            memcpy(s->data, data + at, len);
            at += len;
            memset(&m, 0, sizeof(m));
            vs.n = 0;
            v = fgx_reasm_segment(ctx, &r, isn + (uint32_t)s->rel, 0, s->data, s->len,
                                  (uint64_t)nseg, now, &m);
            if (v == FGX_REASM_ACCEPT)
                take(&mo, s);
            for (size_t i = 0; i < vs.n; i++) {
                assert(vs.cookie[i] < nseg);
                if (vs.accept[i])
                    take(&mo, &segs[vs.cookie[i]]);
            }
            nseg++;
            matched = m.matched;
        } else if (op == 4) {
            uint32_t ack = off <= mo.len ? off : mo.len;

            fgx_reasm_acked(ctx, &r, isn + ack);
            if (ack > mo.acked)
                mo.acked = ack;
        } else {
            vs.n = 0;
            now += (uint64_t)len * 10;
            (void)fgx_reasm_expire(ctx, now, 500);
            for (size_t i = 0; i < vs.n; i++)
                assert(!vs.accept[i] && "an expired segment was accepted");
        }
        assert(!has_pattern(&mo) && "the receiver read the blocked pattern");
    }
    vs.n = 0;
    fgx_reasm_release(ctx, &r);
    for (size_t i = 0; i < vs.n; i++)
        assert(!vs.accept[i]);
    assert(fgx_reasm_ctx_held(ctx) == 0 && fgx_reasm_ctx_kept(ctx) == 0);
    return 0;
}
