/* libFuzzer harness: a configuration backup (fgexctl/cli_config.c: `import`, the page's restore),
 * JSON a team keeps and moves between boxes. What is read is written again, read back and
 * written once more, and the two writings are the same text byte for byte: regexes and payloads
 * are bytes on every path, so a backup round trip may change nothing. (The first reading and
 * the second may differ in which fields are present, defaults written out; what they say
 * cannot.) */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgexctl/cli_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* c as the file text, malloc'd into *out; 0 or what cli_config_write() returned. */
static int write_text(const Fgx__Ctl__Config *c, char **out, size_t *len)
{
    char err[512];
    FILE *f = open_memstream(out, len);
    int rc;

    assert(f);
    rc = cli_config_write(f, c, err, sizeof(err));
    assert(fclose(f) == 0);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Fgx__Ctl__Config *a = NULL, *b = NULL;
    char err[512], *t1 = NULL, *t2 = NULL;
    size_t l1 = 0, l2 = 0;

    if (cli_config_read((const char *)data, size, &a, err, sizeof(err)) != 0)
        return 0;
    if (write_text(a, &t1, &l1) == 0) {
        assert(cli_config_read(t1, l1, &b, err, sizeof(err)) == 0);
        assert(write_text(b, &t2, &l2) == 0);
        assert(l1 == l2 && memcmp(t1, t2, l1) == 0);
        fgx__ctl__config__free_unpacked(b, NULL);
    }
    free(t1);
    free(t2);
    fgx__ctl__config__free_unpacked(a, NULL);
    return 0;
}
