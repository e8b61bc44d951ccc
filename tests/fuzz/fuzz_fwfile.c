/* libFuzzer harness: the firewall's rule file (fgexctl/cmd_fw.c), `fw import`'s input. The
 * parser works in place, so each input is copied into a buffer of its own size (ASan sees any
 * read past it). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fgexctl/cmd_fw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Fgx__Ctl__FwImport imp = FGX__CTL__FW_IMPORT__INIT;
    char err[512];
    char *text = malloc(size + 1);

    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    if (cli_fw_file_parse(text, size, &imp, err, sizeof(err)) == 0)
        cli_fw_file_release(&imp);
    free(text);
    return 0;
}
