/* fgexctl confirmation stage (cli_confirm.h): one question on the terminal before a removal. */
#include "cli_confirm.h"

#include <errno.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli_fmt.h"
#include "cmd.h"

bool cli_confirm_needed(const struct cli_cmd *cmd, char *buf, size_t len)
{
    char arg[256];

    if (!cmd->def || !cmd->def->confirm || cmd->yes)
        return false;
    cli_fmt_escape(cmd->pos[0] ? cmd->pos[0] : "", arg, sizeof(arg));
    /* The text is the command table's own, with one %s for the first positional. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    (void)snprintf(buf, len, cmd->def->confirm, arg);
#pragma GCC diagnostic pop
    return true;
}

int cli_confirm_ask(const char *what, const char *where, int in_fd, FILE *prompt)
{
    char line[64];
    size_t n = 0;

    if (isatty(in_fd) != 1)
        return -ENOTTY;
    (void)fprintf(prompt, "%s on %s? [y/N] ", what, where);
    (void)fflush(prompt);
    for (;;) {
        char c;
        ssize_t r = read(in_fd, &c, 1);

        if (r == -1 && errno == EINTR)
            continue;
        if (r <= 0) {
            (void)fputc('\n', prompt);
            return 0;
        }
        if (c == '\n')
            break;
        if (n + 1 < sizeof(line))
            line[n++] = c;
    }
    line[n] = '\0';
    while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\r'))
        line[--n] = '\0';
    return strcasecmp(line, "y") == 0 || strcasecmp(line, "yes") == 0;
}
