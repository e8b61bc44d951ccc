/* fgexctl contexts stage: named controlds ("box1" -> tls+tcp://10.60.1.1:7443), as kubectl's
 * contexts. They are kept in ~/.config/fgex/contexts.json (mode 0600), one of them current; each
 * stored context has a directory of its own, ~/.config/fgex/contexts/NAME/, where its
 * known_hosts and certs/ live, so that its pin is its own; its login is its box's, shared with
 * -c URL (cli_session.h). Chosen
 * before anything is dialled: main.c applies one (cli_ctx_apply) or hands several to
 * cli_fanout.c. */
#ifndef CLI_CTX_H
#define CLI_CTX_H

#include <stdbool.h>
#include <stddef.h>

struct cli_cmd;

#define CLI_CTX_NAME_MAX 64
#define CLI_CTX_LOCAL "local" /* built in: the local socket, CLI_DEFAULT_URL */
#define CLI_CTX_ALL "all"     /* -C all: every stored context */
#define CLI_CTX_FILE "contexts.json"
#define CLI_CTX_FORMAT "fgex-contexts"

struct cli_ctx {
    char *name;
    char *url;
    char *ca; /* --ca FILE (an absolute path), or NULL */
    bool builtin;
};

struct cli_ctx_store {
    struct cli_ctx *v; /* in the order they were added */
    size_t n;
    char *current; /* the name of the current context, or NULL */
};

/* A URL fgexctl can dial: ipc://PATH or tls+tcp[46]://HOST:PORT with a port 1..65535. */
bool cli_ctx_url_valid(const char *url);

/* A context name: 1..64 of [A-Za-z0-9._-], not starting with '-' or '.', and neither "all" nor
 * "local". Returns 0, or -EINVAL with err saying why. */
int cli_ctx_name_check(const char *name, char *err, size_t errlen);

/* Parse the text of contexts.json into s (initialised here). Returns 0, -ENOMEM, or -EINVAL with
 * err saying what is wrong (with its line and column when the JSON does not parse). */
int cli_ctx_parse(const char *text, size_t len, struct cli_ctx_store *s, char *err, size_t errlen);
/* The text of contexts.json for s: malloc'd, the caller's; NULL when out of memory. */
char *cli_ctx_format(const struct cli_ctx_store *s);
void cli_ctx_store_release(struct cli_ctx_store *s);

/* The stored context name, else the built-in one of that name, else NULL. */
const struct cli_ctx *cli_ctx_find(const struct cli_ctx_store *s, const char *name);
/* Add a context (its strings are copied), or with replace, change the one of that name.
 * Returns 0, -EEXIST (it exists and replace is not set), -EINVAL (bad name) or -ENOMEM. */
int cli_ctx_add(struct cli_ctx_store *s, const char *name, const char *url, const char *ca,
                bool replace);
/* Remove a stored context; the current one stops being current. Returns 0 or -ENOENT. */
int cli_ctx_remove(struct cli_ctx_store *s, const char *name);

/* The contexts that -C spec names: "all" (every stored context, in their order), or names
 * separated by commas, each once. *out is a malloc'd array of pointers into s (and the built-in
 * context), the caller's to free. Returns 0, or -EINVAL / -ENOENT with err saying which. */
int cli_ctx_select(const struct cli_ctx_store *s, const char *spec, const struct cli_ctx ***out,
                   size_t *n, char *err, size_t errlen);

/* The files: DIR/contexts.json, and DIR/contexts/NAME (DIR: cli_pin_base_dir). Return 0 or a
 * negative errno. */
int cli_ctx_file_path(char *buf, size_t len);
int cli_ctx_dir_path(const char *name, char *buf, size_t len);

/* Read contexts.json (a missing file is an empty store) or write it (mode 0600, atomically).
 * Return 0 or a negative errno with err set. */
int cli_ctx_load(struct cli_ctx_store *s, char *err, size_t errlen);
int cli_ctx_save(const struct cli_ctx_store *s, char *err, size_t errlen);

/* Point cmd at c: its URL, its --ca unless the command line gave one, and for a stored context
 * its own directory for pins and sessions (cli_pin_dir_set). Returns 0 or a negative errno. */
int cli_ctx_apply(struct cli_cmd *cmd, const struct cli_ctx *c);

#endif
