/* libFuzzer harness: a service's address text (libcommon/svcaddr.c), as `service add --ip` and
 * imports give it. Checks that what parses formats back to text that parses to the same
 * address and edge (the store keeps the parsed form, the CLI shows the formatted one). */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fgx/svcaddr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fgx_svcaddr a, b;
    const char *why = NULL;
    char text[256];
    char *s = malloc(size + 1);

    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    if (fgx_svcaddr_parse(s, 80, &a, &why) == 0 &&
        fgx_svcaddr_format(&a, text, sizeof(text)) == 0) {
        assert(fgx_svcaddr_parse(text, 80, &b, &why) == 0);
        assert(fgx_svcaddr_equal(&a, &b));
        assert(fgx_svcaddr_overlap(&a, &b));
        assert(a.edge == b.edge && a.to_port == b.to_port); /* ,tcp ,tls ,to=PORT kept */
    }
    (void)fgx_ifname_valid(s);
    free(s);
    return 0;
}
