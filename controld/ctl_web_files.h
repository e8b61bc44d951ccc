/* The dashboard's files (web/), built into controld: $(BUILD)/gen/ctl_web_files.c, written by
 * tools/web_embed at build time (never committed). */
#ifndef CTL_WEB_FILES_H
#define CTL_WEB_FILES_H

#include <stddef.h>

struct ctl_web_file {
    const char *path; /* "/index.html", "/lib/api.js" */
    const unsigned char *data;
    size_t len;
};

extern const struct ctl_web_file ctl_web_files[]; /* ends with a NULL path */
extern const unsigned ctl_web_nfiles;

#endif
