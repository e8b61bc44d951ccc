/* fgexctl trust stage, the files: known_hosts lines "host:port AB:CD:...", certificates and
 * session tokens under ~/.config/fgex, all written whole and atomically with mode 0600, since a
 * half-written known_hosts would either lose a pin or pin nothing. */
#include "cli_pin.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool cli_pin_is_tls(const char *url)
{
    return strncmp(url, "tls+tcp://", 10) == 0 || strncmp(url, "tls+tcp4://", 11) == 0 ||
           strncmp(url, "tls+tcp6://", 11) == 0;
}

static void key_of(const char *s, char *buf, size_t len)
{
    size_t n = 0;

    for (; *s && n + 1 < len; s++, n++) {
        char c = *s;

        bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-';

        buf[n] = '_';
        if (keep)
            buf[n] = c;
    }
    if (len > 0)
        buf[n] = '\0';
}

void cli_pin_url_key(const char *url, char *buf, size_t len)
{
    struct cli_pin_target t;

    if (cli_pin_is_tls(url) && cli_pin_target(url, &t) == 0) {
        (void)snprintf(buf, len, "%s", t.key);
        return;
    }
    key_of(url, buf, len);
}

int cli_pin_target(const char *url, struct cli_pin_target *t)
{
    const char *hp = strstr(url, "://"), *colon, *hend;
    size_t hlen;

    if (!hp || !cli_pin_is_tls(url))
        return -EINVAL;
    hp += 3;
    if (*hp == '[') {
        hend = strchr(hp, ']');
        if (!hend || hend[1] != ':')
            return -EINVAL;
        colon = hend + 1;
        hp++;
    } else {
        colon = strrchr(hp, ':');
        if (!colon)
            return -EINVAL;
        hend = colon;
    }
    hlen = (size_t)(hend - hp);
    if (hlen == 0 || hlen >= sizeof(t->host) || strlen(colon + 1) == 0 ||
        strlen(colon + 1) >= sizeof(t->port) ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1))
        return -EINVAL;
    memcpy(t->host, hp, hlen);
    t->host[hlen] = '\0';
    (void)snprintf(t->port, sizeof(t->port), "%s", colon + 1);
    (void)snprintf(t->hostport, sizeof(t->hostport), strchr(t->host, ':') ? "[%s]:%s" : "%s:%s",
                   t->host, t->port);
    {
        char raw[sizeof(t->key)];

        (void)snprintf(raw, sizeof(raw), "%s_%s", t->host, t->port);
        key_of(raw, t->key, sizeof(t->key));
    }
    return 0;
}

/* Set by cli_pin_dir_set for the one context a process speaks to (each of several contexts
 * runs in a process of its own, cli_fanout.c). */
static char pin_dir_override[PATH_MAX];

int cli_pin_dir_set(const char *dir)
{
    if (!dir) {
        pin_dir_override[0] = '\0';
        return 0;
    }
    if (strlen(dir) >= sizeof(pin_dir_override))
        return -ENAMETOOLONG;
    (void)snprintf(pin_dir_override, sizeof(pin_dir_override), "%s", dir);
    return 0;
}

int cli_pin_dir(char *buf, size_t len)
{
    int n;

    if (pin_dir_override[0] == '\0')
        return cli_pin_base_dir(buf, len);
    n = snprintf(buf, len, "%s", pin_dir_override);
    return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

int cli_pin_base_dir(char *buf, size_t len)
{
    const char *d = getenv("FGEX_CONFIG_DIR"), *home = getenv("HOME");
    int n;

    if (d && *d)
        n = snprintf(buf, len, "%s", d);
    else if (home && *home)
        n = snprintf(buf, len, "%s/.config/fgex", home);
    else
        return -ENOENT;
    return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

int cli_pin_fp_normalize(const char *in, char out[CLI_FP_SIZE])
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;

    if (strncasecmp(in, "SHA256:", 7) == 0)
        in += 7;
    for (const char *p = in; *p; p++) {
        char c = *p;
        int v;

        if (c == ':')
            continue;
        if (c >= '0' && c <= '9')
            v = c - '0';
        else if (c >= 'a' && c <= 'f')
            v = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v = c - 'A' + 10;
        else
            return -EINVAL;
        if (n >= 64)
            return -EINVAL;
        /* Pairs of digits, a colon between pairs. */
        out[n / 2 * 3 + n % 2] = hex[v];
        if (n % 2 == 1 && n < 63)
            out[n / 2 * 3 + 2] = ':';
        n++;
    }
    if (n != 64)
        return -EINVAL;
    out[CLI_FP_LEN] = '\0';
    return 0;
}

int cli_pin_read_file(const char *path, size_t max, char **out, size_t *len)
{
    struct stat st;
    char *buf = NULL;
    size_t got = 0;
    int fd, rc = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1)
        return -errno;
    if (fstat(fd, &st) == -1) {
        rc = -errno;
        goto out;
    }
    if (S_ISDIR(st.st_mode)) {
        rc = -EISDIR;
        goto out;
    }
    /* st_size is 0 for pipes and /dev/stdin: read to the end whatever it says. */
    for (size_t cap = 0;;) {
        ssize_t r;

        if (got + 1 >= cap) {
            size_t ncap = cap ? cap * 2 : 4096;
            char *nb;

            if (cap > max + 1) {
                rc = -EFBIG;
                goto out;
            }
            nb = realloc(buf, ncap);
            if (!nb) {
                rc = -ENOMEM;
                goto out;
            }
            buf = nb;
            cap = ncap;
        }
        r = read(fd, buf + got, cap - got - 1);
        if (r == -1) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            goto out;
        }
        if (r == 0)
            break;
        got += (size_t)r;
        if (got > max) {
            rc = -EFBIG;
            goto out;
        }
    }
    buf[got] = '\0';
    *out = buf;
    *len = got;
    buf = NULL;
out:
    free(buf);
    (void)close(fd);
    return rc;
}

int cli_pin_write_file(const char *path, const void *data, size_t len)
{
    char tmp[PATH_MAX], dir[PATH_MAX];
    const char *p = data;
    char *slash;
    int fd, rc = 0;

    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    (void)snprintf(dir, sizeof(dir), "%s", path);
    slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        /* mkdir -p: on a fresh box even ~/.config may be missing. */
        for (char *c = dir + 1;; c++) {
            if (*c != '/' && *c != '\0')
                continue;
            char saved = *c;
            *c = '\0';
            if (mkdir(dir, 0700) == -1 && errno != EEXIST)
                return -errno;
            *c = saved;
            if (saved == '\0')
                break;
        }
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd == -1)
        return -errno;
    /* The mode of an existing file (from an older umask) is set again. */
    if (fchmod(fd, 0600) == -1)
        rc = -errno;
    while (rc == 0 && len > 0) {
        ssize_t w = write(fd, p, len);

        if (w == -1) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            break;
        }
        p += w;
        len -= (size_t)w;
    }
    if (rc == 0 && fsync(fd) == -1)
        rc = -errno;
    if (close(fd) == -1 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) == -1)
        rc = -errno;
    if (rc < 0)
        (void)unlink(tmp);
    return rc;
}

/* The host:port and fingerprint of one known_hosts line (NUL-terminated, no newline), or false
 * for a comment, a blank or a line that does not parse. */
static bool kh_split(char *line, char **hp, char **fp)
{
    char *s = line + strspn(line, " \t"), *sp;

    if (*s == '\0' || *s == '#')
        return false;
    sp = strpbrk(s, " \t");
    if (!sp)
        return false;
    *sp = '\0';
    *hp = s;
    *fp = sp + 1 + strspn(sp + 1, " \t");
    (*fp)[strcspn(*fp, " \t\r")] = '\0';
    return true;
}

int cli_pin_lookup(const char *path, const char *hostport, char fp[CLI_FP_SIZE], unsigned *line)
{
    char *text = NULL, *save = NULL, *l;
    size_t len;
    unsigned n = 0;
    int rc;

    rc = cli_pin_read_file(path, CLI_PIN_FILE_MAX, &text, &len);
    if (rc < 0)
        return rc;
    rc = -ENOENT;
    /* strsep keeps empty lines, so the numbers match what an editor shows. */
    save = text;
    while ((l = strsep(&save, "\n")) != NULL) {
        char *h, *f;

        n++;
        if (kh_split(l, &h, &f) && strcmp(h, hostport) == 0 && cli_pin_fp_normalize(f, fp) == 0) {
            *line = n;
            rc = 0;
            break;
        }
    }
    free(text);
    return rc;
}

int cli_pin_store(const char *path, const char *hostport, const char *fp)
{
    char *text = NULL, *save, *l, *out = NULL;
    size_t len = 0, olen = 0;
    bool replaced = false;
    FILE *f;
    int rc;

    rc = cli_pin_read_file(path, CLI_PIN_FILE_MAX, &text, &len);
    if (rc == -ENOENT) {
        rc = 0;
        text = NULL;
    }
    if (rc < 0)
        return rc;
    f = open_memstream(&out, &olen);
    if (!f) {
        free(text);
        return -ENOMEM;
    }
    save = text;
    while (save && (l = strsep(&save, "\n")) != NULL) {
        char copy[1024], *h, *fpp;

        if (!save && *l == '\0')
            break; /* the empty piece after the last newline */
        (void)snprintf(copy, sizeof(copy), "%s", l);
        if (kh_split(copy, &h, &fpp) && strcmp(h, hostport) == 0) {
            /* One line per host: the first is replaced, later duplicates dropped. */
            if (!replaced)
                (void)fprintf(f, "%s %s\n", hostport, fp);
            replaced = true;
            continue;
        }
        (void)fprintf(f, "%s\n", l);
    }
    if (!replaced)
        (void)fprintf(f, "%s %s\n", hostport, fp);
    if (fclose(f) == EOF)
        rc = -ENOMEM;
    if (rc == 0)
        rc = cli_pin_write_file(path, out, olen);
    free(out);
    free(text);
    return rc;
}

int cli_pin_check(const char *known_hosts, const char *hostport, const char *seen,
                  const char *explicit_fp, enum cli_pin_outcome *outcome, char *msg, size_t msglen)
{
    char want[CLI_FP_SIZE], known[CLI_FP_SIZE];
    unsigned line = 0;
    int rc;

    if (explicit_fp) {
        if (cli_pin_fp_normalize(explicit_fp, want) < 0) {
            (void)snprintf(msg, msglen,
                           "invalid --fingerprint '%.100s': expected 32 hex byte pairs "
                           "(AB:CD:...)",
                           explicit_fp);
            return -EINVAL;
        }
        if (strcmp(want, seen) != 0) {
            (void)snprintf(msg, msglen,
                           "the certificate of %s does not match --fingerprint: the server "
                           "presents SHA-256 %s",
                           hostport, seen);
            return -EKEYREJECTED;
        }
        rc = cli_pin_store(known_hosts, hostport, want);
        if (rc < 0) {
            (void)snprintf(msg, msglen, "cannot write %s: %s", known_hosts, strerror(-rc));
            return rc;
        }
        *outcome = CLI_PIN_EXPLICIT;
        return 0;
    }
    rc = cli_pin_lookup(known_hosts, hostport, known, &line);
    if (rc == 0) {
        if (strcmp(known, seen) == 0) {
            *outcome = CLI_PIN_KNOWN;
            return 0;
        }
        (void)snprintf(msg, msglen,
                       "the certificate of %s has CHANGED: pinned SHA-256 %s, the server now "
                       "presents %s. If the change is expected (controld got a new "
                       "certificate), remove line %u of %s, or pass --fingerprint with the "
                       "new one; else someone may be intercepting the connection",
                       hostport, known, seen, line, known_hosts);
        return -EKEYREJECTED;
    }
    if (rc != -ENOENT) {
        (void)snprintf(msg, msglen, "cannot read %s: %s", known_hosts, strerror(-rc));
        return rc;
    }
    rc = cli_pin_store(known_hosts, hostport, seen);
    if (rc < 0) {
        (void)snprintf(msg, msglen, "cannot write %s: %s", known_hosts, strerror(-rc));
        return rc;
    }
    *outcome = CLI_PIN_NEW;
    return 0;
}
