/* fgexctl login stage: the session token a `login` got, kept per server in
 * ~/.config/fgex/sessions/ (mode 0600) and sent with every request to that server, and the
 * password read for `login` and `passwd` (from a file, else stdin without echo). */
#ifndef CLI_SESSION_H
#define CLI_SESSION_H

#include <stdbool.h>
#include <stddef.h>

#define CLI_PASSWORD_MAX 4096

/* The token file of url: DIR/sessions/KEY (cli_pin_dir, cli_pin_url_key). Returns 0 or a
 * negative errno. */
int cli_session_path(const char *url, char *buf, size_t len);

/* The token stored at path (malloc'd, the caller's). Returns 0, -ENOENT or a negative errno. */
int cli_session_load(const char *path, char **token);
/* Store token at path, mode 0600. Returns 0 or a negative errno. */
int cli_session_store(const char *path, const char *token);
/* Remove the token file; a missing one is not an error. Returns 0 or a negative errno. */
int cli_session_remove(const char *path);

/* A password: the first line of file (without its line break), else one line of stdin, read
 * without echo and after a prompt when stdin is a terminal (twice when confirm is set, and
 * both must match). *out is malloc'd, the caller's: wipe it (explicit_bzero) and free it.
 * Returns 0, or -EINVAL with err saying why (empty, no match, unreadable file). */
int cli_password_read(const char *file, bool confirm, char **out, char *err, size_t errlen);

#endif
