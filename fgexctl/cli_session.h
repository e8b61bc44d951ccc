/* fgexctl login stage: the session token a `login` got, kept per box in
 * ~/.config/fgex/sessions/ (mode 0600) and sent with every request to that server, and the
 * password read for `login` and `passwd` (from a file, else stdin without echo). */
#ifndef CLI_SESSION_H
#define CLI_SESSION_H

#include <stdbool.h>
#include <stddef.h>

#define CLI_PASSWORD_MAX 4096

/* The name of a box's session file: the URL's key (cli_pin_url_key, the host in lower case)
 * and, when fp (the pinned SHA-256, "AB:CD:...") is given, "@" and fp's hex digits in lower
 * case. So a context and -c URL of one box share a login, and a box that comes back at that
 * address with another certificate (another game) does not get the old one's. */
void cli_session_key(const char *url, const char *fp, char *buf, size_t len);
/* The token file of url: BASE/sessions/KEY (BASE: cli_pin_base_dir, whatever the context),
 * keyed with the pin that pin_dir/known_hosts holds for url (pin_dir may be NULL: none).
 * Returns 0 or a negative errno. */
int cli_session_path_in(const char *url, const char *pin_dir, char *buf, size_t len);
/* cli_session_path_in() with the pins of the context in use (cli_pin_dir): where a login
 * stores its token. */
int cli_session_path(const char *url, char *buf, size_t len);
/* The token file to read (or remove) for url: cli_session_path(), else the one of the address
 * alone when only that exists (a login with --ca, before anything was pinned). */
int cli_session_find(const char *url, char *buf, size_t len);

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
