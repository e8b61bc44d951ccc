/* controld, script filters (issue 16): a service's Python filter file, checked before it is
 * stored. The check runs the file in a Python process of its own (scriptworker/python/
 * fgex/check.py, under python3 -I, with a time limit): a file's module code never runs inside
 * controld. The stored record is a packed fgx.ctl.Script (source, functions, their state). */
#ifndef CTL_SCRIPT_H
#define CTL_SCRIPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control.pb-c.h"
#include "controld/ctl_store.h"
#include "fgx/ruleset.h"

#define CTL_SCRIPT_SOURCE_MAX (1u << 20) /* bytes of one filter file */
#define CTL_SCRIPT_CHECK_MS 5000         /* the check process's time limit */
#define CTL_SCRIPT_DEADLINE_MS 100       /* per call, unless the service sets another */
#define CTL_SCRIPT_DEADLINE_MAX 10000

/* Where the fgex Python package is: $FGEX_PYTHON_DIR, else next to controld's binary
 * (build/bin/fgex-python), else PREFIX/lib/fgex/python. Returns a static string. */
const char *ctl_script_pydir(void);

/* Check a file. Returns 0 with *out a new Script (service_id 0, functions filled; release
 * with ctl_script_free()); -EINVAL with "FILE:LINE: reason" in err for a refused file; another
 * error (the check could not run, timed out) with the reason in err. */
int ctl_script_check(const void *src, size_t len, const char *filename, Fgx__Ctl__Script **out,
                     char *err, size_t errlen);

/* A stored record. -ENOENT quietly when the service has none; *out released with
 * ctl_script_free(). */
int ctl_script_load(struct ctl_txn *t, uint32_t service_id, Fgx__Ctl__Script **out);
int ctl_script_save(struct ctl_txn *t, const Fgx__Ctl__Script *s);
/* What the data path gives scriptworker for a service (fgx/swproto.h's SCRIPT payload: the
 * disabled functions, then the source) into *out (malloc'd), and its deadline. -ENOENT
 * quietly when the service has no script. */
int ctl_script_payload(struct ctl_txn *t, uint32_t service_id, struct fgx_blob *out,
                       uint32_t *deadline_ms, uint8_t *dirs);
/* Frees a Script from ctl_script_check() or ctl_script_load(); NULL is a no-op. */
void ctl_script_free(Fgx__Ctl__Script *s);

/* Backups: every stored Script into cfg->scripts (memory in *keep, released with
 * ctl_script_export_release()); and back: cfg's scripts stored for the services cfg has. */
struct ctl_script_export {
    Fgx__Ctl__Script **scripts;
    size_t n;
};
int ctl_script_export(struct ctl_txn *t, Fgx__Ctl__Config *cfg, struct ctl_script_export *keep);
void ctl_script_export_release(struct ctl_script_export *keep);
/* A UDP service's datagrams build RawPacket only (Firegex 5.0.0 refuses the same): a function
 * of s that takes a stream model would never be called on svc, so -EINVAL with err naming the
 * function, its line and the model. 0 for a TCP service. (script set and import) */
int ctl_script_check_proto(const Fgx__Ctl__Script *s, const struct ctl_service *svc, char *err,
                           size_t errlen);
int ctl_script_import(struct ctl_txn *t, const Fgx__Ctl__Config *cfg, char *err, size_t errlen);

/* What a script reply points into, freed with the reply (struct ctl_rpc.script). */
struct ctl_script_reply {
    Fgx__Ctl__Script *script;
    Fgx__Ctl__ScriptLogEntry *entries, **entry_ptrs;
    char **texts; /* three per entry: function, kind, text */
    size_t nentries;
};
void ctl_script_reply_free(struct ctl_script_reply *sr);

#endif
