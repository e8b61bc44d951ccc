/* libFuzzer harness: the data path's packet decoder (libcommon/pkt.c) on any bytes NFQUEUE could
 * hand over: IPv4 with options, IPv6 with extension headers, fragments, TCP options, UDP. What
 * it checks beyond "no crash": every pointer and length the decoder returns stays inside the
 * buffer, and the checksum check reads only what the decoder pointed at. */
#include <assert.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/pkt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fgx_pkt p;

    if (fgx_pkt_decode(data, size, &p) != 0)
        return 0;
    assert(p.family == 4 || p.family == 6);
    assert(p.ipproto == IPPROTO_TCP || p.ipproto == IPPROTO_UDP);
    assert(p.l3 == data && p.l3_len <= size);
    assert(p.l4_off < p.l3_len);
    assert(p.payload >= p.l3 + p.l4_off && p.payload + p.payload_len <= p.l3 + p.l3_len);
    (void)fgx_pkt_csum_check(&p);
    return 0;
}
