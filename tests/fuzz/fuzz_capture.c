/* libFuzzer harness: a captured connection as controld and fgexctl decode it (libcommon/capture.c)
 * and the pcap fgexctl writes from it (fgexctl/cmd_capture.c: `capture --pcap`, the page's pcap
 * link): the capture is the worker's, but its segments' offsets and lengths, the addresses and
 * the block marks all feed the pcap writer. The input is split at each "\xff\xfe\xfd" into up to
 * 8 captures, as one reply can carry several. What the writer produces must be a pcap: the
 * global header's magic, then records that fill it exactly. */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control.pb-c.h"
#include "fgx/capture.h"
#include "fgexctl/cmd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t sep[3] = {0xff, 0xfe, 0xfd};

static void pcap_well_formed(const uint8_t *b, size_t len)
{
    uint32_t magic;
    size_t at = 24;

    assert(len >= 24);
    memcpy(&magic, b, 4);
    assert(magic == 0xa1b2c3d4u || magic == 0xa1b23c4du);
    while (at < len) {
        uint32_t incl;

        assert(len - at >= 16);
        memcpy(&incl, b + at + 8, 4);
        assert(incl <= len - at - 16);
        at += 16 + incl;
    }
    assert(at == len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    ProtobufCBinaryData caps[8];
    uint8_t *pcap = NULL, *raw = NULL;
    size_t n = 0, start = 0, plen = 0, rlen = 0;
    char err[256];

    for (size_t i = 0; i + sizeof(sep) <= size && n < 7; i++) {
        if (memcmp(data + i, sep, sizeof(sep)) == 0) {
            caps[n].data = (uint8_t *)data + start;
            caps[n++].len = i - start;
            start = i + sizeof(sep);
            i += sizeof(sep) - 1;
        }
    }
    caps[n].data = (uint8_t *)data + start;
    caps[n++].len = size - start;

    for (size_t i = 0; i < n; i++) {
        struct fgx_cap c;

        if (fgx_cap_decode(caps[i].data, caps[i].len, &c) == 0) {
            for (int d = 0; d < 2; d++)
                assert(c.len[d] == 0 || c.data[d] != NULL);
            fgx_cap_release(&c);
        }
    }
    rep.n_captures = n;
    rep.captures = caps;
    if (cli_cmd_capture_pcap(&rep, &pcap, &plen, err, sizeof(err)) == 0)
        pcap_well_formed(pcap, plen);
    free(pcap);
    for (int s2c = 0; s2c < 2; s2c++) {
        if (cli_cmd_event_raw(&rep, s2c, &raw, &rlen) == 0)
            free(raw);
        raw = NULL;
    }
    return 0;
}
