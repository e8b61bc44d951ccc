/* Filter labels ("team12 sqli"): checked where they enter (controld's filter add/set and
 * imports, fgexctl's ruleset file parse), so that every path that carries one later (ruleset
 * files, backups, events, tables) can print it as is. */
#include "fgx/ruleset.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Length of the UTF-8 sequence at s (1..4), or 0 when it is not well formed (overlong forms,
 * surrogates and code points past U+10FFFF included). *cp gets the code point. */
static size_t utf8_seq(const unsigned char *s, size_t left, unsigned *cp)
{
    unsigned c = s[0], need, min;

    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        need = 1;
        min = 0x80;
        c &= 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        min = 0x800;
        c &= 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        min = 0x10000;
        c &= 0x07;
    } else {
        return 0;
    }
    if (left < need + 1)
        return 0;
    for (unsigned i = 1; i <= need; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return need + 1;
}

int fgx_label_check(const char *s, char *err, size_t errlen)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t len, i = 0;

    if (s == NULL)
        return 0;
    len = strlen(s);
    if (len > FGX_LABEL_MAX) {
        (void)snprintf(err, errlen, "label longer than %d bytes", FGX_LABEL_MAX);
        return -EINVAL;
    }
    while (i < len) {
        unsigned cp;
        size_t n = utf8_seq(p + i, len - i, &cp);

        if (n == 0) {
            (void)snprintf(err, errlen, "label is not UTF-8 text (byte %zu)", i + 1);
            return -EINVAL;
        }
        /* C0, DEL and C1 controls: a label goes into tables and terminals as is. */
        if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f)) {
            (void)snprintf(err, errlen, "label has a control character (byte %zu)", i + 1);
            return -EINVAL;
        }
        i += n;
    }
    return 0;
}
