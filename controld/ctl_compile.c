/* controld compile stage, the slow half (ctl_compile.h): records what a probe run of a change
 * request could not answer, compiles it in forked children that write their results to a
 * memfd each, and serves those results to the request's second run. A child process rather
 * than a thread: hyperscan has no cancel, and only a process can be stopped at the time limit
 * (and a crash of the compiler stays in it). */
#include "controld/ctl_compile.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "controld/ctl_config.h"
#include "fgx/log.h"

enum { REC_DB = 1, REC_CHECK = 2 };

/* Fewer checks than this are not worth a process of their own (one takes about 0.5 ms). */
#define CC_CHECKS_PER_KID 256

struct cc_check {
    char *regex;
    bool nocase;
    int ipproto;
    bool done;
    int rv;
    char *msg;
};

struct cc_db {
    struct fgx_pattern *pats; /* the patterns that apply to dir, regexes owned */
    size_t n;
    enum fgx_dir dir;
    int ipproto;
    uint64_t key;
    bool done;
    int rv;
    char *msg;
    struct fgx_blob blob;
};

struct cc_kid {
    pid_t pid;
    int fd; /* memfd with its results */
    bool reaped;
    int status;
};

static struct {
    unsigned timeout_ms, kids_max;
    bool collecting, running;
    struct cc_check *checks;
    size_t nchecks, cap_checks;
    uint32_t *index; /* open addressing over checks: i + 1, 0 empty */
    size_t index_cap;
    struct cc_db *dbs;
    size_t ndbs, cap_dbs;
    struct cc_kid kids[CTL_COMPILE_KIDS_MAX];
    size_t nkids;
    uint64_t started_ms, deadline_ms;
    /* the change this session compiles for, in words, and when its first compile started:
     * what a refused second change is told (ctl_compile_busy()) */
    char what[256];
    uint64_t first_ms;
} cc = {.timeout_ms = CTL_COMPILE_TIMEOUT_DEFAULT * 1000u};

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void ctl_compile_config(unsigned timeout_s, unsigned kids)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

    if (timeout_s < 1)
        timeout_s = 1;
    if (timeout_s > CTL_COMPILE_TIMEOUT_MAX)
        timeout_s = CTL_COMPILE_TIMEOUT_MAX;
    cc.timeout_ms = timeout_s * 1000u;
    if (kids == 0)
        kids = ncpu > 0 ? (unsigned)ncpu : 1;
    cc.kids_max = kids > CTL_COMPILE_KIDS_MAX ? CTL_COMPILE_KIDS_MAX : kids;
}

void ctl_compile_collect(bool on)
{
    cc.collecting = on;
}

bool ctl_compile_collecting(void)
{
    return cc.collecting;
}

size_t ctl_compile_pending(void)
{
    size_t n = 0;

    for (size_t i = 0; i < cc.nchecks; i++)
        n += !cc.checks[i].done;
    for (size_t i = 0; i < cc.ndbs; i++)
        n += !cc.dbs[i].done;
    return n;
}

bool ctl_compile_running(void)
{
    return cc.running;
}

/* ---- the checks, found by hash ---- */

static uint64_t check_hash(const char *regex, bool nocase, int ipproto)
{
    uint64_t h = fgx_hash64(regex, strlen(regex), FGX_HASH64_SEED);

    return h ^ ((uint64_t)nocase << 63) ^ ((uint64_t)(unsigned)ipproto << 40);
}

static struct cc_check *check_find(const char *regex, bool nocase, int ipproto, size_t *slot)
{
    size_t mask = cc.index_cap - 1, i;

    if (cc.index_cap == 0)
        return NULL;
    for (i = check_hash(regex, nocase, ipproto) & mask; cc.index[i] != 0; i = (i + 1) & mask) {
        struct cc_check *c = &cc.checks[cc.index[i] - 1];

        if (c->nocase == nocase && c->ipproto == ipproto && strcmp(c->regex, regex) == 0)
            return c;
    }
    if (slot)
        *slot = i;
    return NULL;
}

static int index_grow(void)
{
    size_t cap = cc.index_cap ? cc.index_cap * 2 : 1024;
    uint32_t *idx = calloc(cap, sizeof(*idx));

    if (!idx)
        return -ENOMEM;
    free(cc.index);
    cc.index = idx;
    cc.index_cap = cap;
    for (size_t k = 0; k < cc.nchecks; k++) {
        const struct cc_check *c = &cc.checks[k];
        size_t i = check_hash(c->regex, c->nocase, c->ipproto) & (cap - 1);

        while (idx[i] != 0)
            i = (i + 1) & (cap - 1);
        idx[i] = (uint32_t)(k + 1);
    }
    return 0;
}

static int check_add(const char *regex, bool nocase, int ipproto)
{
    struct cc_check *c;
    size_t slot = 0;

    if ((cc.nchecks + 1) * 2 > cc.index_cap && index_grow() < 0)
        return -ENOMEM;
    if (cc.nchecks == cc.cap_checks) {
        size_t cap = cc.cap_checks ? cc.cap_checks * 2 : 64;
        struct cc_check *n = realloc(cc.checks, cap * sizeof(*n));

        if (!n)
            return -ENOMEM;
        cc.checks = n;
        cc.cap_checks = cap;
    }
    if (check_find(regex, nocase, ipproto, &slot))
        return 0;
    c = &cc.checks[cc.nchecks];
    memset(c, 0, sizeof(*c));
    c->regex = strdup(regex);
    if (!c->regex)
        return -ENOMEM;
    c->nocase = nocase;
    c->ipproto = ipproto;
    cc.index[slot] = (uint32_t)(++cc.nchecks);
    return 0;
}

static void err_copy(char *err, size_t errlen, const char *msg)
{
    if (errlen)
        (void)snprintf(err, errlen, "%s", msg ? msg : "");
}

bool ctl_compile_check_result(const char *regex, bool nocase, int ipproto, int *rv, char *err,
                              size_t errlen)
{
    struct cc_check *c;

    if (!regex)
        return false;
    c = check_find(regex, nocase, ipproto, NULL);
    if (c && c->done) {
        *rv = c->rv;
        err_copy(err, errlen, c->msg);
        return true;
    }
    if (!cc.collecting)
        return false;
    if (!c && check_add(regex, nocase, ipproto) < 0)
        return false; /* no memory to record it: check it now, as without a session */
    *rv = 0;
    err_copy(err, errlen, "");
    return true;
}

/* ---- the databases ---- */

static void db_release(struct cc_db *d)
{
    for (size_t i = 0; i < d->n; i++)
        free((char *)d->pats[i].regex);
    free(d->pats);
    free(d->msg);
    fgx_blob_release(&d->blob);
}

static int db_add(const struct fgx_pattern *pats, size_t n, enum fgx_dir dir, int ipproto,
                  uint64_t key)
{
    struct cc_db *d;

    if (cc.ndbs == cc.cap_dbs) {
        size_t cap = cc.cap_dbs ? cc.cap_dbs * 2 : 8;
        struct cc_db *nd = realloc(cc.dbs, cap * sizeof(*nd));

        if (!nd)
            return -ENOMEM;
        cc.dbs = nd;
        cc.cap_dbs = cap;
    }
    d = &cc.dbs[cc.ndbs];
    memset(d, 0, sizeof(*d));
    d->pats = calloc(n ? n : 1, sizeof(*d->pats));
    if (!d->pats)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!(pats[i].dir & dir))
            continue;
        d->pats[d->n] = pats[i];
        d->pats[d->n].regex = strdup(pats[i].regex ? pats[i].regex : "");
        if (!d->pats[d->n].regex) {
            db_release(d);
            return -ENOMEM;
        }
        d->n++;
    }
    d->dir = dir;
    d->ipproto = ipproto;
    d->key = key;
    cc.ndbs++;
    return 0;
}

bool ctl_compile_db_result(const struct fgx_pattern *pats, size_t n, enum fgx_dir dir, int ipproto,
                           uint64_t key, struct fgx_blob *out, int *rv, char *err, size_t errlen)
{
    struct cc_db *d = NULL;

    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < cc.ndbs && !d; i++)
        if (cc.dbs[i].key == key)
            d = &cc.dbs[i];
    if (d && d->done) {
        *rv = d->rv;
        err_copy(err, errlen, d->msg);
        if (d->rv < 0 || d->blob.len == 0)
            return true;
        out->data = malloc(d->blob.len);
        if (!out->data) {
            *rv = -ENOMEM;
            err_copy(err, errlen, "out of memory");
            return true;
        }
        memcpy(out->data, d->blob.data, d->blob.len);
        out->len = d->blob.len;
        out->hash = key;
        return true;
    }
    if (!cc.collecting)
        return false;
    if (!d && db_add(pats, n, dir, ipproto, key) < 0)
        return false;
    *rv = 0;
    err_copy(err, errlen, "");
    return true;
}

/* ---- sharing the work out ---- */

size_t ctl_compile_share(const size_t *sizes, size_t ndbs, size_t nchecks, size_t kids,
                         size_t *kid_of_db, size_t *lo, size_t *hi)
{
    size_t nk = ndbs + (nchecks + CC_CHECKS_PER_KID - 1) / CC_CHECKS_PER_KID, free_kids,
           first_free, per, extra, at = 0;
    bool *taken;

    if (nk > kids)
        nk = kids;
    if (nk == 0)
        return 0;
    taken = calloc(ndbs ? ndbs : 1, sizeof(*taken));
    if (!taken)
        return 0;
    /* Largest first, each to the next child, wrapping: a big set never waits for a small one
     * when there are children enough. */
    for (size_t r = 0; r < ndbs; r++) {
        size_t best = ndbs;

        for (size_t i = 0; i < ndbs; i++)
            if (!taken[i] && (best == ndbs || sizes[i] > sizes[best]))
                best = i;
        taken[best] = true;
        kid_of_db[best] = r % nk;
    }
    free(taken);
    first_free = ndbs < nk ? ndbs : 0;
    free_kids = ndbs < nk ? nk - ndbs : nk;
    per = nchecks / free_kids;
    extra = nchecks % free_kids;
    for (size_t k = 0; k < nk; k++) {
        size_t take = 0;

        if (k >= first_free)
            take = per + (k - first_free < extra);
        lo[k] = at;
        hi[k] = at + take;
        at += take;
    }
    return nk;
}

/* ---- the children ---- */

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t w = write(fd, p, len);

        if (w == -1) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static int rec_write(int fd, uint8_t kind, uint32_t idx, int32_t rv, const char *msg,
                     const void *blob, uint64_t bloblen)
{
    uint32_t mlen = msg ? (uint32_t)strlen(msg) : 0;
    int r = write_all(fd, &kind, 1);

    if (r == 0)
        r = write_all(fd, &idx, sizeof(idx));
    if (r == 0)
        r = write_all(fd, &rv, sizeof(rv));
    if (r == 0)
        r = write_all(fd, &mlen, sizeof(mlen));
    if (r == 0 && mlen)
        r = write_all(fd, msg, mlen);
    if (r == 0)
        r = write_all(fd, &bloblen, sizeof(bloblen));
    if (r == 0 && bloblen)
        r = write_all(fd, blob, bloblen);
    return r;
}

/* In the child: the jobs of child k, then exit. Never returns. */
static void kid_run(int fd, size_t k, const size_t *kid_of_db, const size_t *db_idx,
                    size_t npend_db, const size_t *chk_idx, size_t lo, size_t hi)
{
    char err[FGX_PATTERN_WARN_MAX * FGX_PATTERN_WARN_LEN + 8];

    for (size_t i = 0; i < npend_db; i++) {
        struct cc_db *d = &cc.dbs[db_idx[i]];
        struct fgx_blob b = {0};
        int rv;

        if (kid_of_db[i] != k)
            continue;
        err[0] = '\0';
        rv = fgx_ruleset_compile(d->pats, d->n, d->dir, d->ipproto, &b, err, sizeof(err));
        if (rec_write(fd, REC_DB, (uint32_t)db_idx[i], rv, err, b.data, rv == 0 ? b.len : 0) < 0)
            _exit(2);
        fgx_blob_release(&b);
    }
    for (size_t i = lo; i < hi; i++) {
        struct cc_check *c = &cc.checks[chk_idx[i]];
        int rv;

        /* Whatever the check says, a reason or a warning, is replayed word for word. */
        err[0] = '\0';
        rv = ctl_config_regex_lint_text(c->regex, c->nocase, (uint8_t)c->ipproto, err,
                                        sizeof(err));
        if (rec_write(fd, REC_CHECK, (uint32_t)chk_idx[i], rv, err, NULL, 0) < 0)
            _exit(2);
    }
    _exit(0);
}

static void kids_kill(void)
{
    for (size_t k = 0; k < cc.nkids; k++) {
        if (!cc.kids[k].reaped && cc.kids[k].pid > 0) {
            kill(cc.kids[k].pid, SIGKILL);
            /* SIGKILL is not ignorable: this returns as soon as the kernel has torn it down. */
            while (waitpid(cc.kids[k].pid, NULL, 0) == -1 && errno == EINTR)
                ;
            cc.kids[k].reaped = true;
        }
        if (cc.kids[k].fd != -1)
            close(cc.kids[k].fd);
        cc.kids[k].fd = -1;
    }
    cc.nkids = 0;
    cc.running = false;
}

int ctl_compile_start(void)
{
    size_t *db_idx = NULL, *sizes = NULL, *kid_of_db = NULL, *chk_idx = NULL;
    size_t lo[CTL_COMPILE_KIDS_MAX], hi[CTL_COMPILE_KIDS_MAX], npd = 0, npc = 0, nk, npats = 0;
    pid_t parent = getpid();
    int rv = 0;

    if (cc.kids_max == 0)
        ctl_compile_config(cc.timeout_ms / 1000, 0);
    db_idx = calloc(cc.ndbs + 1, sizeof(*db_idx));
    sizes = calloc(cc.ndbs + 1, sizeof(*sizes));
    kid_of_db = calloc(cc.ndbs + 1, sizeof(*kid_of_db));
    chk_idx = calloc(cc.nchecks + 1, sizeof(*chk_idx));
    if (!db_idx || !sizes || !kid_of_db || !chk_idx) {
        rv = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < cc.ndbs; i++) {
        if (cc.dbs[i].done)
            continue;
        sizes[npd] = cc.dbs[i].n;
        npats += cc.dbs[i].n;
        db_idx[npd++] = i;
    }
    for (size_t i = 0; i < cc.nchecks; i++)
        if (!cc.checks[i].done)
            chk_idx[npc++] = i;
    nk = ctl_compile_share(sizes, npd, npc, cc.kids_max, kid_of_db, lo, hi);
    cc.started_ms = now_ms();
    cc.deadline_ms = cc.started_ms + cc.timeout_ms;
    cc.running = true;
    fgx_info("compiling off the control loop: %zu database(s) of %zu pattern(s) and %zu regex "
             "check(s) in %zu process(es), limit %u s",
             npd, npats, npc, nk, cc.timeout_ms / 1000);
    (void)fflush(stderr);
    for (size_t k = 0; k < nk; k++) {
        struct cc_kid *kid = &cc.kids[k];
        pid_t pid;

        kid->fd = memfd_create("fgx-compile", MFD_CLOEXEC);
        kid->reaped = false;
        kid->pid = 0;
        cc.nkids = k + 1;
        if (kid->fd == -1) {
            rv = -errno;
            fgx_err("cannot create the compiler's result file: %s", strerror(errno));
            goto out;
        }
        pid = fork();
        if (pid == -1) {
            rv = -errno;
            fgx_err("cannot fork the compiler: %s", strerror(errno));
            goto out;
        }
        if (pid == 0) {
            /* Gone with controld, whatever it dies of; controld's own signal handlers are no
             * business of the compiler's. */
            (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(3);
            signal(SIGTERM, SIG_DFL);
            signal(SIGINT, SIG_DFL);
            kid_run(kid->fd, k, kid_of_db, db_idx, npd, chk_idx, lo[k], hi[k]);
        }
        kid->pid = pid;
    }
out:
    if (rv < 0)
        kids_kill();
    free(db_idx);
    free(sizes);
    free(kid_of_db);
    free(chk_idx);
    return rv;
}

/* Read child k's records into the session. */
static int kid_collect(struct cc_kid *kid)
{
    struct stat st;
    char *buf = NULL, *p, *end;
    int rv = -EPROTO;

    if (fstat(kid->fd, &st) == -1)
        return -errno;
    if (st.st_size == 0)
        return 0;
    buf = malloc((size_t)st.st_size);
    if (!buf)
        return -ENOMEM;
    if (pread(kid->fd, buf, (size_t)st.st_size, 0) != st.st_size) {
        free(buf);
        return -EIO;
    }
    p = buf;
    end = buf + st.st_size;
    while (p < end) {
        uint8_t kind;
        uint32_t idx, mlen;
        int32_t r;
        uint64_t blen;
        const char *msg, *blob;

        if ((size_t)(end - p) < 13)
            goto out;
        memcpy(&kind, p, 1);
        memcpy(&idx, p + 1, 4);
        memcpy(&r, p + 5, 4);
        memcpy(&mlen, p + 9, 4);
        p += 13;
        if ((size_t)(end - p) < (size_t)mlen + 8)
            goto out;
        msg = p;
        p += mlen;
        memcpy(&blen, p, 8);
        p += 8;
        if ((uint64_t)(end - p) < blen)
            goto out;
        blob = p;
        p += blen;
        if (kind == REC_CHECK && idx < cc.nchecks) {
            struct cc_check *c = &cc.checks[idx];

            c->msg = strndup(msg, mlen);
            c->rv = r;
            c->done = c->msg != NULL;
        } else if (kind == REC_DB && idx < cc.ndbs) {
            struct cc_db *d = &cc.dbs[idx];

            d->msg = strndup(msg, mlen);
            d->rv = r;
            if (blen) {
                d->blob.data = malloc(blen);
                if (!d->blob.data) {
                    rv = -ENOMEM;
                    goto out;
                }
                memcpy(d->blob.data, blob, blen);
                d->blob.len = blen;
                d->blob.hash = d->key;
            }
            d->done = d->msg != NULL;
        } else {
            goto out;
        }
    }
    rv = 0;
out:
    free(buf);
    return rv;
}

int ctl_compile_poll(bool *done, char *err, size_t errlen)
{
    size_t left = 0;
    int rv = 0;

    *done = false;
    if (!cc.running) {
        *done = true;
        return 0;
    }
    for (size_t k = 0; k < cc.nkids; k++) {
        struct cc_kid *kid = &cc.kids[k];

        if (!kid->reaped && waitpid(kid->pid, &kid->status, WNOHANG) == kid->pid)
            kid->reaped = true;
        left += !kid->reaped;
    }
    if (left > 0) {
        if (now_ms() < cc.deadline_ms)
            return 0;
        kids_kill();
        *done = true;
        fgx_warn("the compile ran past --compile-timeout (%u s): stopped", cc.timeout_ms / 1000);
        (void)snprintf(err, errlen,
                       "compiling this change takes longer than --compile-timeout (%u s): it was "
                       "stopped and nothing was changed (a service's regexes compile together: "
                       "use fewer or simpler ones, or raise controld's --compile-timeout)",
                       cc.timeout_ms / 1000);
        return -ETIMEDOUT;
    }
    for (size_t k = 0; k < cc.nkids && rv == 0; k++) {
        int st = cc.kids[k].status;

        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            if (WIFSIGNALED(st))
                fgx_err("the compiler process died of signal %d", WTERMSIG(st));
            else
                fgx_err("the compiler process exited with status %d", WEXITSTATUS(st));
            (void)snprintf(err, errlen,
                           "the regex compiler failed (%s %d): nothing was changed",
                           WIFSIGNALED(st) ? "signal" : "status",
                           WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            rv = -ECHILD;
        } else if (kid_collect(&cc.kids[k]) < 0) {
            (void)snprintf(err, errlen, "cannot read the regex compiler's results: nothing was "
                                        "changed");
            rv = -ECHILD;
        }
    }
    if (rv == 0 && ctl_compile_pending() > 0) {
        (void)snprintf(err, errlen, "the regex compiler left work undone: nothing was changed");
        rv = -ECHILD;
    }
    if (rv == 0)
        fgx_info("compiled in %llu ms", (unsigned long long)(now_ms() - cc.started_ms));
    kids_kill();
    *done = true;
    return rv;
}

void ctl_compile_reset(void)
{
    kids_kill();
    for (size_t i = 0; i < cc.nchecks; i++) {
        free(cc.checks[i].regex);
        free(cc.checks[i].msg);
    }
    for (size_t i = 0; i < cc.ndbs; i++)
        db_release(&cc.dbs[i]);
    free(cc.checks);
    free(cc.dbs);
    free(cc.index);
    cc.checks = NULL;
    cc.dbs = NULL;
    cc.index = NULL;
    cc.nchecks = cc.cap_checks = cc.ndbs = cc.cap_dbs = cc.index_cap = 0;
    cc.collecting = false;
    cc.what[0] = '\0';
    cc.first_ms = 0;
}

void ctl_compile_what_set(const char *what)
{
    if (cc.what[0])
        return;
    snprintf(cc.what, sizeof(cc.what), "%s", what && *what ? what : "a change");
    cc.first_ms = now_ms();
}

bool ctl_compile_busy(char *what, size_t len, unsigned *secs)
{
    if (!cc.what[0])
        return false;
    snprintf(what, len, "%s", cc.what);
    *secs = (unsigned)((now_ms() - cc.first_ms) / 1000);
    return true;
}
