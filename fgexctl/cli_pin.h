/* fgexctl trust stage, the files: where fgexctl keeps what it learned about servers
 * (~/.config/fgex: known_hosts, certs/, sessions/), and the trust-on-first-use decision for a
 * server's certificate fingerprint. No network here: cli_tls.c reads the certificate. */
#ifndef CLI_PIN_H
#define CLI_PIN_H

#include <stdbool.h>
#include <stddef.h>

#define CLI_FP_LEN 95 /* "AB:CD:..." for a SHA-256: 32 bytes as hex pairs with colons */
#define CLI_FP_SIZE (CLI_FP_LEN + 1)
#define CLI_PIN_FILE_MAX (1u << 20) /* known_hosts, PEM and token files are small */

/* A tls+tcp URL taken apart. */
struct cli_pin_target {
    char host[256]; /* without brackets for IPv6 */
    char port[8];
    char hostport[272]; /* the known_hosts key: "host:port", "[v6]:port" */
    char key[272];      /* a file name for certs/ and sessions/: "host_port" */
};

/* True for tls+tcp://, tls+tcp4:// and tls+tcp6:// URLs. */
bool cli_pin_is_tls(const char *url);

/* Split a tls+tcp URL. Returns 0 or -EINVAL (no port, bad brackets, too long). */
int cli_pin_target(const char *url, struct cli_pin_target *t);

/* A file name for any URL (ipc:// too), for sessions/: every byte but [A-Za-z0-9.-] as '_'. */
void cli_pin_url_key(const char *url, char *buf, size_t len);

/* fgexctl's directory: $FGEX_CONFIG_DIR, else $HOME/.config/fgex. Returns 0 or -ENOENT (no
 * home) / -ENAMETOOLONG. Nothing is created. */
int cli_pin_base_dir(char *buf, size_t len);

/* Where known_hosts, certs/ and sessions/ are: the directory of the context in use
 * (cli_pin_dir_set, cli_ctx.c), else cli_pin_base_dir. Returns as cli_pin_base_dir. */
int cli_pin_dir(char *buf, size_t len);
/* Use dir for pins and sessions from now on in this process (NULL: back to the base
 * directory). Returns 0 or -ENAMETOOLONG. */
int cli_pin_dir_set(const char *dir);

/* "AB:CD:..." from any case, with or without colons (or an "SHA256:" prefix). Returns 0 or
 * -EINVAL. */
int cli_pin_fp_normalize(const char *in, char out[CLI_FP_SIZE]);

/* The pinned fingerprint of hostport in the known_hosts file at path, and its line number.
 * Returns 0, -ENOENT (no such line, or no file), or another negative errno. */
int cli_pin_lookup(const char *path, const char *hostport, char fp[CLI_FP_SIZE], unsigned *line);

/* Pin fp for hostport: its line is replaced, or appended. The file is rewritten atomically with
 * mode 0600, its directory created (0700) when missing. Returns 0 or a negative errno. */
int cli_pin_store(const char *path, const char *hostport, const char *fp);

enum cli_pin_outcome {
    CLI_PIN_KNOWN,    /* the fingerprint was already pinned */
    CLI_PIN_NEW,      /* first use: pinned now */
    CLI_PIN_EXPLICIT, /* --fingerprint matched and is pinned now */
};

/* Trust on first use. seen is what the server presents; explicit is --fingerprint or NULL.
 * Returns 0 with *outcome set, -EKEYREJECTED with msg explaining (a changed certificate names
 * the file and line to remove), -EINVAL (explicit does not parse), or another negative errno. */
int cli_pin_check(const char *known_hosts, const char *hostport, const char *seen,
                  const char *explicit_fp, enum cli_pin_outcome *outcome, char *msg, size_t msglen);

/* Write a whole file atomically (temporary file, fsync, rename) with mode 0600, creating its
 * directory (0700, one level) when missing. Returns 0 or a negative errno. */
int cli_pin_write_file(const char *path, const void *data, size_t len);

/* Read a whole file of at most max bytes; *out is malloc'd, NUL-terminated, the caller's.
 * Returns 0, -ENOENT, -EFBIG or another negative errno. */
int cli_pin_read_file(const char *path, size_t max, char **out, size_t *len);

#endif
