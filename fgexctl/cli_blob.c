/* The one place the commands read a file (cli_args.h): from the disk for fgexctl, from the
 * blobs handed over in memory for controld's web API, which must never open a path that a
 * request names. */
#include "cli_args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli_pin.h"

const struct cli_blob *cli_args_blob(const struct cli_cmd *cmd, const char *name)
{
    if (!cmd->in_memory || !name)
        return NULL;
    for (size_t i = 0; i < cmd->nblobs; i++)
        if (cmd->blobs[i].name && strcmp(cmd->blobs[i].name, name) == 0)
            return &cmd->blobs[i];
    return NULL;
}

int cli_args_read_file(const struct cli_cmd *cmd, const char *path, size_t max, char **text,
                       size_t *len)
{
    const struct cli_blob *b;
    char *t;

    if (!cmd->in_memory)
        return cli_pin_read_file(strcmp(path, "-") == 0 ? "/dev/stdin" : path, max, text, len);
    b = cli_args_blob(cmd, path);
    if (!b)
        return -ENOENT;
    if (b->len > max)
        return -EFBIG;
    t = malloc(b->len + 1);
    if (!t)
        return -ENOMEM;
    if (b->len)
        memcpy(t, b->data, b->len);
    t[b->len] = '\0';
    *text = t;
    *len = b->len;
    return 0;
}
