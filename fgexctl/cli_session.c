/* fgexctl login stage: session tokens on disk and passwords from a file or the terminal.
 * A token is as good as the password for its lifetime, so its file is 0600 like an ssh key.
 * Sessions belong to the box, not to how it was named: a context and -c URL of the same box
 * (the same host and port, the same pinned certificate) share one, in the base directory. */
#include "cli_session.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "cli_pin.h"

void cli_session_key(const char *url, const char *fp, char *buf, size_t len)
{
    size_t n;

    cli_pin_url_key(url, buf, len);
    /* Host names are not case-sensitive: one box, one key. */
    if (cli_pin_is_tls(url))
        for (char *c = buf; *c; c++)
            *c = (char)tolower((unsigned char)*c);
    if (!fp || !*fp)
        return;
    n = strlen(buf);
    if (n + 1 < len)
        buf[n++] = '@';
    for (; *fp && n + 1 < len; fp++)
        if (*fp != ':')
            buf[n++] = (char)tolower((unsigned char)*fp);
    buf[n < len ? n : len - 1] = '\0';
}

int cli_session_path_in(const char *url, const char *pin_dir, char *buf, size_t len)
{
    char base[3072], key[512], kh[3100], fp[CLI_FP_SIZE] = "";
    struct cli_pin_target t;
    unsigned line;
    int rc = cli_pin_base_dir(base, sizeof(base));

    if (rc < 0)
        return rc;
    if (cli_pin_is_tls(url) && cli_pin_target(url, &t) == 0 && pin_dir &&
        snprintf(kh, sizeof(kh), "%s/known_hosts", pin_dir) < (int)sizeof(kh) &&
        cli_pin_lookup(kh, t.hostport, fp, &line) < 0)
        fp[0] = '\0';
    cli_session_key(url, fp, key, sizeof(key));
    if (snprintf(buf, len, "%s/sessions/%s", base, key) >= (int)len)
        return -ENAMETOOLONG;
    return 0;
}

int cli_session_path(const char *url, char *buf, size_t len)
{
    char dir[3072];
    int rc = cli_pin_dir(dir, sizeof(dir));

    if (rc < 0)
        return rc;
    return cli_session_path_in(url, dir, buf, len);
}

int cli_session_find(const char *url, char *buf, size_t len)
{
    char other[4096];
    int rc = cli_session_path(url, buf, len);

    if (rc < 0 || access(buf, F_OK) == 0)
        return rc;
    /* A login made with --ca pinned nothing: its file has the address alone, and a later
     * command that pinned the (CA-checked) certificate on first use still finds it. */
    if (cli_session_path_in(url, NULL, other, sizeof(other)) == 0 && access(other, F_OK) == 0 &&
        snprintf(buf, len, "%s", other) < (int)len)
        return 0;
    return cli_session_path(url, buf, len);
}

int cli_session_load(const char *path, char **token)
{
    size_t len;
    int rc = cli_pin_read_file(path, CLI_PIN_FILE_MAX, token, &len);

    if (rc < 0)
        return rc;
    (*token)[strcspn(*token, "\r\n")] = '\0';
    if (**token == '\0') {
        free(*token);
        *token = NULL;
        return -ENOENT;
    }
    return 0;
}

int cli_session_store(const char *path, const char *token)
{
    size_t n = strlen(token);
    char *buf = malloc(n + 2);
    int rc;

    if (!buf)
        return -ENOMEM;
    memcpy(buf, token, n);
    buf[n] = '\n';
    buf[n + 1] = '\0';
    rc = cli_pin_write_file(path, buf, n + 1);
    explicit_bzero(buf, n + 2);
    free(buf);
    return rc;
}

int cli_session_remove(const char *path)
{
    if (unlink(path) == -1 && errno != ENOENT)
        return -errno;
    return 0;
}

/* One line from fd into buf (without the line break). Returns its length, or -1 at the end of
 * input with nothing read, or -2 when it does not fit. */
static long read_line(int fd, char *buf, size_t cap)
{
    size_t n = 0;

    for (;;) {
        char c;
        ssize_t r = read(fd, &c, 1);

        if (r == -1 && errno == EINTR)
            continue;
        if (r <= 0)
            return n == 0 ? -1 : (long)n;
        if (c == '\n')
            break;
        if (n + 1 >= cap)
            return -2;
        buf[n++] = c;
    }
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    buf[n] = '\0';
    return (long)n;
}

/* Prompt on stderr and read a line from the terminal on stdin with echo off. */
static long prompt_line(const char *prompt, char *buf, size_t cap)
{
    struct termios old, quiet;
    bool restore = false;
    long n;

    (void)fputs(prompt, stderr);
    (void)fflush(stderr);
    if (tcgetattr(STDIN_FILENO, &old) == 0) {
        quiet = old;
        quiet.c_lflag &= ~(tcflag_t)ECHO;
        quiet.c_lflag |= ECHONL;
        restore = tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet) == 0;
    }
    n = read_line(STDIN_FILENO, buf, cap);
    if (restore)
        (void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
    return n;
}

int cli_password_read(const char *file, bool confirm, char **out, char *err, size_t errlen)
{
    char *buf = NULL, *again = NULL;
    size_t len = 0, bufsize = 0;
    long n;
    int rc = 0;

    if (file) {
        rc = cli_pin_read_file(file, CLI_PASSWORD_MAX, &buf, &len);
        if (rc < 0) {
            (void)snprintf(err, errlen, "cannot read the password file %s: %s", file,
                           rc == -EFBIG ? "too large" : strerror(-rc));
            return rc == -EFBIG ? -EINVAL : rc;
        }
        bufsize = len + 1;
        buf[strcspn(buf, "\r\n")] = '\0';
    } else {
        bool tty = isatty(STDIN_FILENO) == 1;

        buf = calloc(1, CLI_PASSWORD_MAX);
        again = calloc(1, CLI_PASSWORD_MAX);
        bufsize = CLI_PASSWORD_MAX;
        if (!buf || !again) {
            rc = -ENOMEM;
            goto out;
        }
        n = tty ? prompt_line(confirm ? "New password: " : "Password: ", buf, CLI_PASSWORD_MAX)
                : read_line(STDIN_FILENO, buf, CLI_PASSWORD_MAX);
        if (n == -2) {
            (void)snprintf(err, errlen, "the password is too long");
            rc = -EINVAL;
            goto out;
        }
        if (n < 0)
            buf[0] = '\0';
        if (tty && confirm && buf[0]) {
            n = prompt_line("Again: ", again, CLI_PASSWORD_MAX);
            if (n < 0 || strcmp(buf, again) != 0) {
                (void)snprintf(err, errlen, "the two passwords differ");
                rc = -EINVAL;
                goto out;
            }
        }
    }
    if (buf[0] == '\0') {
        (void)snprintf(err, errlen, "the password is empty%s",
                       file ? "" : " (give it on stdin or with --password-file)");
        rc = -EINVAL;
        goto out;
    }
    *out = buf;
    buf = NULL;
out:
    if (buf) {
        explicit_bzero(buf, bufsize);
        free(buf);
    }
    if (again) {
        explicit_bzero(again, CLI_PASSWORD_MAX);
        free(again);
    }
    return rc;
}
