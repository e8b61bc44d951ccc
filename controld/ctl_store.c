/* controld state stage: LMDB. Services and filters are stored as control.proto messages (the
 * computed reply fields left out) keyed by big-endian id, so that ids sort numerically; the meta
 * db holds the id and generation counters and the per-filter and per-service totals; events
 * holds the recent match events by seq (control.proto Event); dbcache maps a ruleset key to a
 * serialized hyperscan database so that a restart does not recompile. */
#include "controld/ctl_store.h"
#include "controld/ctl_svcaddr.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <lmdb.h>

#include "control.pb-c.h"
#include "controld/ctl_health.h"
#include "fgx/log.h"

struct ctl_store {
    MDB_env *env;
    MDB_dbi services, filters, meta, dbcache, events, history, rates, captures;
    MDB_dbi scripts; /* service id -> its script filter file (ctl_script.c's record) */
    MDB_dbi health_log; /* (service id, seq) -> a health log entry (control.proto HealthEntry) */
    size_t mapsize;
    char *dir;
    struct ctl_store_health health;
    bool bg_failing; /* the background writer's last commit was refused */
    bool reserve;    /* the reserve file is in place */
    bool reserve_on; /* controld keeps one (ctl_store_reserve_start()) */
};

struct ctl_txn {
    struct ctl_store *s;
    MDB_txn *txn;
    bool write, background;
    const char *what;
    int space_err; /* a put or delete refused for want of room (the map full) */
};

static const char meta_next_service[] = "next_service";
static const char meta_next_filter[] = "next_filter";
static const char meta_generation[] = "generation";

/* The one place LMDB's codes become errnos; its own message is logged once, here. */
static int store_err(int rc, const char *what)
{
    switch (rc) {
    case MDB_SUCCESS:
        return 0;
    case MDB_NOTFOUND:
        return -ENOENT;
    case MDB_MAP_FULL:
    case MDB_TXN_FULL:
        /* Its own size limit, told apart from a full disk (ENOSPC, passed through below). */
        fgx_err("state store: %s: %s", what, mdb_strerror(rc));
        return -EFBIG;
    default:
        fgx_err("state store: %s: %s", what, mdb_strerror(rc));
        if (rc > 0 && rc < 1000) /* LMDB passes system errnos through unchanged */
            return -rc;
        return -EIO;
    }
}

/* Less room than this left on the store's file system after a failed write means it was full. */
#define STORE_FULL_SLACK (256 << 10)

/* LMDB reports a short write as EIO (it keeps no errno for it): on a file system with room for
 * only part of a commit, pwrite writes what fits and returns less. A real I/O error leaves the
 * room where it was; a short write for want of room leaves (almost) none. */
static bool store_disk_full(struct ctl_store *s)
{
    struct statvfs st;
    unsigned long long room;
    int fd;

    if (mdb_env_get_fd(s->env, &fd) != MDB_SUCCESS || fstatvfs(fd, &st) == -1)
        return false;
    /* root may write into the blocks reserved for it (ext4), so its limit is f_bfree. */
    room = (unsigned long long)(geteuid() == 0 ? st.f_bfree : st.f_bavail) * st.f_frsize;
    return room < STORE_FULL_SLACK;
}

/* A commit's error: as store_err(), but an EIO on a full file system is ENOSPC. */
static int commit_err(struct ctl_store *s, int rc, const char *what)
{
    if (rc == EIO && store_disk_full(s)) {
        fgx_err("state store: %s: %s (a short write: the disk is full)", what, mdb_strerror(rc));
        return -ENOSPC;
    }
    return store_err(rc, what);
}

const char *ctl_store_strerror(int err)
{
    switch (err) {
    case -EFBIG:
        return "state store full: the LMDB map size is reached";
    case -ENOSPC:
        return "no space left on the state store's disk: nothing was changed";
    case -EDQUOT:
        return "disk quota of the state store exceeded: nothing was changed";
    case -EROFS:
        return "the state store's disk is read-only: nothing was changed";
    case -ENOENT:
        return "not found";
    case -EEXIST:
        return "already exists";
    case -ENOMEM:
        return "out of memory";
    case -EINVAL:
        return "corrupt record in the state store";
    default:
        return "state store I/O error";
    }
}

static void be32_put(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t be32_get(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void be64_put(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static uint64_t be64_get(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static int mkdir_p(const char *dir)
{
    char path[4096];
    int rv = 0;

    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0700) == -1 && errno != EEXIST) {
            rv = -errno;
            fgx_err("state store: cannot create %s: %s", path, strerror(errno));
            return rv;
        }
        *p = c;
        if (c == '\0')
            break;
    }
    return 0;
}

/* LMDB writes its lock file through a shared mapping, sized with ftruncate: on a full disk the
 * first write to it is a SIGBUS, not an error. Its blocks are reserved here first, so a full
 * disk is a plain ENOSPC instead. LMDB keeps a lock file larger than it needs (more reader
 * slots); 64 KiB covers its default 126 readers many times over. */
#define STORE_LOCK_RESERVE (64 << 10)

static int lock_file_reserve(const char *dir)
{
    char path[4096];
    int fd, rc;

    if (snprintf(path, sizeof(path), "%s/lock.mdb", dir) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd == -1) {
        rc = errno;
        fgx_err("state store: cannot open %s: %s", path, strerror(rc));
        return -rc;
    }
    rc = posix_fallocate(fd, 0, STORE_LOCK_RESERVE);
    close(fd);
    if (rc != 0) {
        fgx_err("state store: cannot reserve %s: %s", path, strerror(rc));
        return -rc;
    }
    return 0;
}

static bool space_err(int rv)
{
    return rv == -EFBIG || rv == -ENOSPC || rv == -EDQUOT;
}

static uint64_t unix_s(void)
{
    return (uint64_t)time(NULL);
}

static void reserve_path(const struct ctl_store *s, char *buf, size_t len)
{
    (void)snprintf(buf, len, "%s/reserve", s->dir);
}

/* Best effort: without room the store works, with less margin at a stop (logged). */
static void reserve_make(struct ctl_store *s)
{
    char path[4200];
    int fd, rc;

    if (s->reserve || !s->reserve_on)
        return;
    reserve_path(s, path, sizeof(path));
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd == -1) {
        fgx_warn("state store: cannot make the reserve %s: %s", path, strerror(errno));
        return;
    }
    rc = posix_fallocate(fd, 0, CTL_STORE_RESERVE);
    close(fd);
    if (rc != 0) {
        fgx_warn("state store: no room for the reserve %s (%s): a stop on a full disk may "
                 "lose the events still in memory",
                 path, strerror(rc));
        (void)unlink(path);
        return;
    }
    s->reserve = true;
}

void ctl_store_reserve_start(struct ctl_store *s)
{
    s->reserve_on = true;
    reserve_make(s);
}

bool ctl_store_reserve_release(struct ctl_store *s)
{
    char path[4200];

    if (!s->reserve)
        return false;
    reserve_path(s, path, sizeof(path));
    if (unlink(path) == -1 && errno != ENOENT) {
        fgx_err("state store: cannot delete the reserve %s: %s", path, strerror(errno));
        return false;
    }
    s->reserve = false;
    fgx_info("state store: the reserve (%u KiB) was given up to make room", CTL_STORE_RESERVE >> 10);
    return true;
}

bool ctl_store_reserve_held(const struct ctl_store *s)
{
    return s->reserve;
}

const char *ctl_store_space_text(int err)
{
    switch (err) {
    case -EFBIG:
        return "the state store's LMDB map is full";
    case -EDQUOT:
        return "the state store's disk quota is exceeded";
    case -ENOSPC:
        return "no space left on the state store's disk";
    default:
        return ctl_store_strerror(err);
    }
}

void ctl_store_health_get(const struct ctl_store *s, struct ctl_store_health *out)
{
    *out = s->health;
}

void ctl_txn_label(struct ctl_txn *t, const char *what, bool background)
{
    t->what = what;
    t->background = background;
}

/* A write refused for want of room: a spell starts (noted once) or goes on. */
static void health_fail(struct ctl_store *s, const struct ctl_txn *t, int rv)
{
    struct ctl_store_health *h = &s->health;
    const char *what = t->what ? t->what : "a change";

    if (t->background)
        s->bg_failing = true;
    h->err = rv;
    h->failures++;
    (void)snprintf(h->what, sizeof(h->what), "%s", what);
    if (h->degraded)
        return;
    h->degraded = true;
    h->since = unix_s();
    h->failures = 1;
    ctl_health_note(0, CTL_HEALTH_ERROR, "store-full", 0,
                    "the state store cannot write (%s): %s was refused; events and counters wait "
                    "in memory and are written when there is room again",
                    ctl_store_space_text(rv), what);
}

/* A write committed: the spell ends, unless the background writer still cannot write. */
static void health_ok(struct ctl_store *s, const struct ctl_txn *t)
{
    struct ctl_store_health *h = &s->health;

    if (t->background)
        s->bg_failing = false;
    if (!h->degraded || s->bg_failing)
        return;
    ctl_health_note(0, CTL_HEALTH_INFO, "store-ok", h->failures,
                    "the state store writes again, after %llu s and %llu refused writes; what "
                    "waited in memory is written",
                    (unsigned long long)(unix_s() - h->since), (unsigned long long)h->failures);
    *h = (struct ctl_store_health){0};
    reserve_make(s);
}

int ctl_store_open(const char *dir, size_t mapsize, struct ctl_store **out)
{
    struct ctl_store *s = calloc(1, sizeof(*s));
    MDB_txn *txn = NULL;
    int rv;

    if (!s)
        return -ENOMEM;
    s->mapsize = mapsize ? mapsize : CTL_STORE_MAPSIZE_DEFAULT;
    s->dir = strdup(dir);
    if (!s->dir) {
        free(s);
        return -ENOMEM;
    }
    rv = mkdir_p(dir);
    if (rv == 0)
        rv = lock_file_reserve(dir);
    if (rv < 0)
        goto err;
    rv = store_err(mdb_env_create(&s->env), "create environment");
    if (rv < 0)
        goto err;
    rv = store_err(mdb_env_set_mapsize(s->env, s->mapsize), "set map size");
    if (rv == 0)
        rv = store_err(mdb_env_set_maxdbs(s->env, 16), "set max dbs");
    if (rv == 0)
        rv = store_err(mdb_env_open(s->env, dir, 0, 0600), dir);
    if (rv < 0)
        goto err;
    rv = store_err(mdb_txn_begin(s->env, NULL, 0, &txn), "begin");
    if (rv < 0)
        goto err;
    rv = store_err(mdb_dbi_open(txn, "services", MDB_CREATE, &s->services), "open services");
    if (rv == 0)
        rv = store_err(mdb_dbi_open(txn, "filters", MDB_CREATE, &s->filters), "open filters");
    if (rv == 0)
        rv = store_err(mdb_dbi_open(txn, "meta", MDB_CREATE, &s->meta), "open meta");
    if (rv == 0)
        rv = store_err(mdb_dbi_open(txn, "dbcache", MDB_CREATE, &s->dbcache), "open dbcache");
    if (rv == 0)
        rv = store_err(mdb_dbi_open(txn, "events", MDB_CREATE, &s->events), "open events");
    if (rv == 0)
        rv = store_err(mdb_dbi_open(txn, "history", MDB_CREATE, &s->history), "open history");
    if (rv == 0)
        rv = store_err(mdb_dbi_open(txn, "rates", MDB_CREATE, &s->rates), "open rates");
    if (rv == 0)
        rv = store_err(mdb_dbi_open(txn, "captures", MDB_CREATE, &s->captures), "open captures");
    if (rv == 0)
        rv = store_err(mdb_dbi_open(txn, "scripts", MDB_CREATE, &s->scripts), "open scripts");
    if (rv == 0)
        rv = store_err(mdb_dbi_open(txn, "health", MDB_CREATE, &s->health_log), "open health");
    if (rv < 0) {
        mdb_txn_abort(txn);
        goto err;
    }
    rv = commit_err(s, mdb_txn_commit(txn), "commit");
    if (rv < 0)
        goto err;
    *out = s;
    return 0;
err:
    ctl_store_close(s);
    return rv;
}

void ctl_store_close(struct ctl_store *s)
{
    if (!s)
        return;
    if (s->env)
        mdb_env_close(s->env);
    free(s->dir);
    free(s);
}

int ctl_txn_begin(struct ctl_store *s, bool write, struct ctl_txn **out)
{
    struct ctl_txn *t = calloc(1, sizeof(*t));
    int rv;

    if (!t)
        return -ENOMEM;
    t->s = s;
    t->write = write;
    rv = store_err(mdb_txn_begin(s->env, NULL, write ? 0 : MDB_RDONLY, &t->txn), "begin");
    if (rv < 0) {
        free(t);
        return rv;
    }
    *out = t;
    return 0;
}

int ctl_txn_commit(struct ctl_txn *t)
{
    int rv = commit_err(t->s, mdb_txn_commit(t->txn), "commit");

    if (t->write && space_err(rv))
        health_fail(t->s, t, rv);
    else if (t->write && rv == 0)
        health_ok(t->s, t);
    free(t);
    return rv;
}

void ctl_txn_abort(struct ctl_txn *t)
{
    if (!t)
        return;
    /* a put refused for want of room ends here: its caller gave up the change */
    if (t->write && t->space_err)
        health_fail(t->s, t, t->space_err);
    mdb_txn_abort(t->txn);
    free(t);
}

/* ---- raw records ---- */

static int rec_get(struct ctl_txn *t, MDB_dbi dbi, const void *key, size_t klen, MDB_val *val)
{
    MDB_val k = {.mv_size = klen, .mv_data = (void *)key};
    int rc = mdb_get(t->txn, dbi, &k, val);

    if (rc == MDB_NOTFOUND)
        return -ENOENT;
    return store_err(rc, "get");
}

static int rec_put(struct ctl_txn *t, MDB_dbi dbi, const void *key, size_t klen, const void *data,
                   size_t dlen)
{
    MDB_val k = {.mv_size = klen, .mv_data = (void *)key};
    MDB_val v = {.mv_size = dlen, .mv_data = (void *)data};

    int rv = store_err(mdb_put(t->txn, dbi, &k, &v, 0), "put");

    if (space_err(rv))
        t->space_err = rv;
    return rv;
}

static int rec_del(struct ctl_txn *t, MDB_dbi dbi, const void *key, size_t klen)
{
    MDB_val k = {.mv_size = klen, .mv_data = (void *)key};
    int rc = mdb_del(t->txn, dbi, &k, NULL);

    if (rc == MDB_NOTFOUND)
        return -ENOENT;
    rc = store_err(rc, "delete");
    if (space_err(rc))
        t->space_err = rc;
    return rc;
}

static int meta_u64_get(struct ctl_txn *t, const void *key, size_t klen, uint64_t *out)
{
    MDB_val v;
    int rv = rec_get(t, t->s->meta, key, klen, &v);

    if (rv == -ENOENT) {
        *out = 0;
        return 0;
    }
    if (rv < 0)
        return rv;
    if (v.mv_size != 8)
        return -EINVAL;
    *out = be64_get(v.mv_data);
    return 0;
}

static int meta_u64_put(struct ctl_txn *t, const void *key, size_t klen, uint64_t val)
{
    uint8_t b[8];

    be64_put(b, val);
    return rec_put(t, t->s->meta, key, klen, b, sizeof(b));
}

/* Ids start at 1 and are never reused, so a stale reference can never name a new object. */
static int next_id(struct ctl_txn *t, const char *key, uint32_t *out)
{
    uint64_t v;
    int rv = meta_u64_get(t, key, strlen(key), &v);

    if (rv < 0)
        return rv;
    if (v == 0)
        v = 1;
    if (v > UINT32_MAX)
        return -EOVERFLOW;
    rv = meta_u64_put(t, key, strlen(key), v + 1);
    if (rv == 0)
        *out = (uint32_t)v;
    return rv;
}

/* ---- services ---- */

static int service_decode(const MDB_val *v, struct ctl_service *out)
{
    Fgx__Ctl__Service *m = fgx__ctl__service__unpack(NULL, v->mv_size, v->mv_data);
    int rv = -EINVAL;

    if (!m) {
        fgx_err("state store: an undecodable service record");
        return -EINVAL;
    }
    memset(out, 0, sizeof(*out));
    out->id = m->id;
    if (snprintf(out->name, sizeof(out->name), "%s", m->name) >= (int)sizeof(out->name))
        goto out;
    out->ipproto = m->proto == FGX__CTL__PROTO__PROTO_UDP ? IPPROTO_UDP : IPPROTO_TCP;
    /* Records from before the address list hold ip/port alone: one address. */
    if (ctl_svcmsg_parse(m, out, NULL, 0) < 0)
        goto out;
    out->active = m->active;
    out->fail_open = m->fail_open;
    /* A record from before the setting existed has none: the fail-closed default. */
    out->midstream = m->has_midstream && m->midstream == FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN
                         ? FGX_MIDSTREAM_SCAN
                         : FGX_MIDSTREAM_RESET;
    out->created = m->has_created ? m->created : 0;
    out->tls = m->has_tls && m->tls;
    out->upstream_plain = m->has_upstream && m->upstream == FGX__CTL__UPSTREAM__UPSTREAM_PLAIN;
    out->capture_off = m->has_capture && !m->capture;
    out->capture_conns = m->has_capture_conns ? m->capture_conns : 0;
    out->capture_bytes = m->has_capture_bytes ? m->capture_bytes : 0;
    rv = 0;
out:
    if (rv < 0)
        fgx_err("state store: a corrupt record for service %u", m->id);
    fgx__ctl__service__free_unpacked(m, NULL);
    return rv;
}

static int service_write(struct ctl_txn *t, const struct ctl_service *svc)
{
    Fgx__Ctl__Service m = FGX__CTL__SERVICE__INIT;
    static struct ctl_svcmsg st; /* controld is single-threaded; too large for the stack */
    static uint8_t buf[8192];
    uint8_t key[4];
    size_t len;
    int rv;

    rv = ctl_svcmsg_fill(&st, svc, &m);
    if (rv < 0)
        return rv;
    m.id = svc->id;
    m.name = (char *)svc->name;
    m.proto = svc->ipproto == IPPROTO_UDP ? FGX__CTL__PROTO__PROTO_UDP : FGX__CTL__PROTO__PROTO_TCP;
    m.active = svc->active;
    m.fail_open = svc->fail_open;
    m.has_midstream = 1;
    m.midstream = svc->midstream == FGX_MIDSTREAM_SCAN ? FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN
                                                       : FGX__CTL__MIDSTREAM__MIDSTREAM_RESET;
    m.has_created = 1;
    m.created = svc->created;
    m.has_tls = svc->tls;
    m.tls = svc->tls;
    m.has_upstream = svc->tls && svc->upstream_plain;
    m.upstream = FGX__CTL__UPSTREAM__UPSTREAM_PLAIN;
    m.has_capture = 1;
    m.capture = !svc->capture_off;
    m.has_capture_conns = svc->capture_conns != 0;
    m.capture_conns = svc->capture_conns;
    m.has_capture_bytes = svc->capture_bytes != 0;
    m.capture_bytes = svc->capture_bytes;
    len = fgx__ctl__service__get_packed_size(&m);
    if (len > sizeof(buf))
        return -EINVAL;
    fgx__ctl__service__pack(&m, buf);
    be32_put(key, svc->id);
    return rec_put(t, t->s->services, key, sizeof(key), buf, len);
}

int ctl_store_service_get(struct ctl_txn *t, uint32_t id, struct ctl_service *out)
{
    uint8_t key[4];
    MDB_val v;
    int rv;

    be32_put(key, id);
    rv = rec_get(t, t->s->services, key, sizeof(key), &v);
    if (rv < 0)
        return rv;
    return service_decode(&v, out);
}

int ctl_store_service_list(struct ctl_txn *t, struct ctl_service **out, size_t *n)
{
    MDB_cursor *cur = NULL;
    struct ctl_service *arr = NULL;
    size_t cnt = 0, cap = 0;
    MDB_val k, v;
    int rv, rc;

    rv = store_err(mdb_cursor_open(t->txn, t->s->services, &cur), "cursor");
    if (rv < 0)
        return rv;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            struct ctl_service *na = realloc(arr, ncap * sizeof(*na));
            if (!na) {
                rv = -ENOMEM;
                goto err;
            }
            arr = na;
            cap = ncap;
        }
        rv = service_decode(&v, &arr[cnt]);
        if (rv < 0)
            goto err;
        cnt++;
    }
    if (rc != MDB_NOTFOUND) {
        rv = store_err(rc, "list services");
        goto err;
    }
    mdb_cursor_close(cur);
    *out = arr;
    *n = cnt;
    return 0;
err:
    mdb_cursor_close(cur);
    free(arr);
    return rv;
}

int ctl_store_service_by_name(struct ctl_txn *t, const char *name, struct ctl_service *out)
{
    struct ctl_service *all;
    size_t n;
    int rv = ctl_store_service_list(t, &all, &n);

    if (rv < 0)
        return rv;
    rv = -ENOENT;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(all[i].name, name) == 0) {
            *out = all[i];
            rv = 0;
            break;
        }
    }
    free(all);
    return rv;
}

int ctl_store_service_put(struct ctl_txn *t, struct ctl_service *svc)
{
    struct ctl_service *all;
    size_t n;
    int rv;

    size_t ia, ib;

    /* The one-address form: a caller that set port/addr (and no list, or a list of one) means
     * that address. With several, the list is what counts. */
    if (svc->naddrs == 0) {
        ctl_service_addrs_single(svc);
    } else if (svc->naddrs == 1) {
        struct fgx_svcaddr *one = &svc->addrs[0];

        /* struct fgx_cidr is bytes only, and parsed ones are zeroed first: memcmp is exact. */
        if (memcmp(&one->cidr, &svc->addr, sizeof(svc->addr)) != 0) {
            one->cidr = svc->addr;
            one->ifname[0] = '\0';
        }
        one->port = svc->port;
    }
    ctl_service_addrs_sync(svc);
    if (svc->name[0] == '\0' || svc->port == 0)
        return -EINVAL;
    rv = ctl_store_service_list(t, &all, &n);
    if (rv < 0)
        return rv;
    for (size_t i = 0; i < n; i++) {
        if (all[i].id == svc->id)
            continue;
        if (strcmp(all[i].name, svc->name) == 0 || ctl_service_overlap(&all[i], svc, &ia, &ib)) {
            rv = -EEXIST;
            break;
        }
    }
    free(all);
    if (rv < 0)
        return rv;
    if (svc->id == 0) {
        rv = next_id(t, meta_next_service, &svc->id);
        if (rv < 0)
            return rv;
        svc->created = (uint64_t)time(NULL);
    }
    return service_write(t, svc);
}

static void svc_totals_key(uint8_t key[6], uint32_t service_id)
{
    key[0] = 's';
    key[1] = ':';
    be32_put(key + 2, service_id);
}

static int svc_totals_del(struct ctl_txn *t, uint32_t id)
{
    uint8_t key[6];
    int rv;

    svc_totals_key(key, id);
    rv = rec_del(t, t->s->meta, key, sizeof(key));
    return rv == -ENOENT ? 0 : rv;
}

int ctl_store_service_del_record(struct ctl_txn *t, uint32_t id)
{
    uint8_t key[4];

    be32_put(key, id);
    return rec_del(t, t->s->services, key, sizeof(key));
}

int ctl_store_service_del(struct ctl_txn *t, uint32_t id)
{
    struct ctl_filter *fs;
    uint8_t key[4];
    size_t n;
    int rv;

    rv = ctl_store_filter_list(t, id, &fs, &n);
    if (rv < 0)
        return rv;
    for (size_t i = 0; i < n && rv == 0; i++)
        rv = ctl_store_filter_del(t, fs[i].id);
    ctl_filters_free(fs, n);
    if (rv < 0)
        return rv;
    rv = svc_totals_del(t, id);
    if (rv == 0)
        rv = ctl_store_retired_set(t, id, 0);
    if (rv < 0)
        return rv;
    rv = ctl_store_tls_del(t, id);
    if (rv < 0)
        return rv;
    rv = ctl_store_script_del(t, id);
    if (rv < 0 && rv != -ENOENT)
        return rv;
    be32_put(key, id);
    return rec_del(t, t->s->services, key, sizeof(key));
}

/* ---- TLS certificates and keys: "tlsc:" and "tlsk:" + the service id, in meta ---- */

static size_t tls_key_name(char *key, size_t len, char kind, uint32_t id)
{
    return (size_t)snprintf(key, len, "tls%c:%u", kind, id);
}

static int tls_get_one(struct ctl_txn *t, char kind, uint32_t id, uint8_t **out, size_t *len)
{
    char key[32];
    MDB_val v;
    int rv = rec_get(t, t->s->meta, key, tls_key_name(key, sizeof(key), kind, id), &v);

    if (rv < 0)
        return rv;
    *out = malloc(v.mv_size + 1);
    if (*out == NULL)
        return -ENOMEM;
    memcpy(*out, v.mv_data, v.mv_size);
    (*out)[v.mv_size] = '\0';
    *len = v.mv_size;
    return 0;
}

int ctl_store_tls_get(struct ctl_txn *t, uint32_t service_id, struct ctl_tls_pem *out)
{
    int rv;

    memset(out, 0, sizeof(*out));
    rv = tls_get_one(t, 'c', service_id, &out->cert, &out->cert_len);
    if (rv == 0)
        rv = tls_get_one(t, 'k', service_id, &out->key, &out->key_len);
    if (rv < 0)
        ctl_tls_pem_release(out);
    return rv;
}

int ctl_store_tls_put(struct ctl_txn *t, uint32_t service_id, const struct ctl_tls_pem *p)
{
    char key[32];
    int rv = rec_put(t, t->s->meta, key, tls_key_name(key, sizeof(key), 'c', service_id), p->cert,
                     p->cert_len);

    if (rv == 0)
        rv = rec_put(t, t->s->meta, key, tls_key_name(key, sizeof(key), 'k', service_id), p->key,
                     p->key_len);
    return rv;
}

int ctl_store_tls_del(struct ctl_txn *t, uint32_t service_id)
{
    char key[32];
    int rv = rec_del(t, t->s->meta, key, tls_key_name(key, sizeof(key), 'c', service_id));

    if (rv < 0 && rv != -ENOENT)
        return rv;
    rv = rec_del(t, t->s->meta, key, tls_key_name(key, sizeof(key), 'k', service_id));
    return rv == -ENOENT ? 0 : rv;
}

void ctl_tls_pem_release(struct ctl_tls_pem *p)
{
    if (p == NULL)
        return;
    if (p->key != NULL) {
        /* volatile: the wipe must not be optimised away before free() */
        volatile uint8_t *k = p->key;

        for (size_t i = 0; i < p->key_len; i++)
            k[i] = 0;
    }
    free(p->cert);
    free(p->key);
    memset(p, 0, sizeof(*p));
}

/* ---- filters ---- */

static int filter_decode(const MDB_val *v, struct ctl_filter *out)
{
    Fgx__Ctl__Filter *m = fgx__ctl__filter__unpack(NULL, v->mv_size, v->mv_data);

    if (!m) {
        fgx_err("state store: an undecodable filter record");
        return -EINVAL;
    }
    memset(out, 0, sizeof(*out));
    out->regex = strdup(m->regex);
    if (!out->regex) {
        fgx__ctl__filter__free_unpacked(m, NULL);
        return -ENOMEM;
    }
    out->id = m->id;
    out->service_id = m->service_id;
    out->dir = m->dir == FGX__CTL__DIR__DIR_C2S   ? FGX_DIR_C2S
               : m->dir == FGX__CTL__DIR__DIR_S2C ? FGX_DIR_S2C
                                                  : FGX_DIR_BOTH;
    out->nocase = m->nocase;
    out->active = m->active;
    out->created = m->has_created ? m->created : 0;
    out->log = m->has_action && m->action == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG;
    out->revision = m->has_revision ? m->revision : 0;
    out->edited = m->has_edited ? m->edited : 0;
    if (m->label && m->label[0] != '\0') {
        out->label = strdup(m->label);
        if (!out->label) {
            free(out->regex);
            out->regex = NULL;
            fgx__ctl__filter__free_unpacked(m, NULL);
            return -ENOMEM;
        }
    }
    fgx__ctl__filter__free_unpacked(m, NULL);
    return 0;
}

static int filter_write(struct ctl_txn *t, const struct ctl_filter *f)
{
    Fgx__Ctl__Filter m = FGX__CTL__FILTER__INIT;
    uint8_t key[4], *buf;
    size_t len;
    int rv;

    m.id = f->id;
    m.service_id = f->service_id;
    m.regex = f->regex;
    m.dir = f->dir == FGX_DIR_C2S   ? FGX__CTL__DIR__DIR_C2S
            : f->dir == FGX_DIR_S2C ? FGX__CTL__DIR__DIR_S2C
                                    : FGX__CTL__DIR__DIR_BOTH;
    m.nocase = f->nocase;
    m.active = f->active;
    m.has_created = 1;
    m.created = f->created;
    /* Written only when set: a block filter's record stays what it was before actions. */
    if (f->log) {
        m.has_action = 1;
        m.action = FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG;
    }
    if (f->label && f->label[0] != '\0')
        m.label = f->label;
    /* Likewise only once edited: records stored before edits (issue 27) decode as revision 0. */
    if (f->revision > 0) {
        m.has_revision = m.has_edited = 1;
        m.revision = f->revision;
        m.edited = f->edited;
    }
    len = fgx__ctl__filter__get_packed_size(&m);
    buf = malloc(len);
    if (!buf)
        return -ENOMEM;
    fgx__ctl__filter__pack(&m, buf);
    be32_put(key, f->id);
    rv = rec_put(t, t->s->filters, key, sizeof(key), buf, len);
    free(buf);
    return rv;
}

int ctl_store_filter_get(struct ctl_txn *t, uint32_t id, struct ctl_filter *out)
{
    uint8_t key[4];
    MDB_val v;
    int rv;

    be32_put(key, id);
    rv = rec_get(t, t->s->filters, key, sizeof(key), &v);
    if (rv < 0)
        return rv;
    return filter_decode(&v, out);
}

int ctl_store_filter_put(struct ctl_txn *t, struct ctl_filter *f)
{
    struct ctl_service svc;
    int rv;

    if (!f->regex || f->regex[0] == '\0')
        return -EINVAL;
    rv = ctl_store_service_get(t, f->service_id, &svc);
    if (rv < 0)
        return rv;
    if (f->id == 0) {
        rv = next_id(t, meta_next_filter, &f->id);
        if (rv < 0)
            return rv;
        /* The top bit of a compiled id says "log" (FGX_FILTER_ID_LOG). */
        if (f->id >= FGX_FILTER_ID_MASK) /* the mask itself: the game's flag (ctl_game.h) */
            return -EOVERFLOW;
        f->created = (uint64_t)time(NULL);
    }
    return filter_write(t, f);
}

static void blocked_key(uint8_t key[6], uint32_t filter_id)
{
    key[0] = 'b';
    key[1] = ':';
    be32_put(key + 2, filter_id);
}

static void matched_key(uint8_t key[6], uint32_t filter_id)
{
    key[0] = 'm';
    key[1] = ':';
    be32_put(key + 2, filter_id);
}

int ctl_store_filter_del(struct ctl_txn *t, uint32_t id)
{
    uint8_t key[4], bkey[6];
    int rv;

    be32_put(key, id);
    rv = rec_del(t, t->s->filters, key, sizeof(key));
    if (rv < 0)
        return rv;
    blocked_key(bkey, id);
    rv = rec_del(t, t->s->meta, bkey, sizeof(bkey));
    if (rv < 0 && rv != -ENOENT)
        return rv;
    matched_key(bkey, id);
    rv = rec_del(t, t->s->meta, bkey, sizeof(bkey));
    return rv == -ENOENT ? 0 : rv;
}

int ctl_store_filter_list(struct ctl_txn *t, uint32_t service_id, struct ctl_filter **out,
                          size_t *n)
{
    MDB_cursor *cur = NULL;
    struct ctl_filter *arr = NULL;
    size_t cnt = 0, cap = 0;
    MDB_val k, v;
    int rv, rc;

    rv = store_err(mdb_cursor_open(t->txn, t->s->filters, &cur), "cursor");
    if (rv < 0)
        return rv;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        struct ctl_filter f;

        rv = filter_decode(&v, &f);
        if (rv < 0)
            goto err;
        if (service_id != 0 && f.service_id != service_id) {
            ctl_filter_release(&f);
            continue;
        }
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            struct ctl_filter *na = realloc(arr, ncap * sizeof(*na));
            if (!na) {
                ctl_filter_release(&f);
                rv = -ENOMEM;
                goto err;
            }
            arr = na;
            cap = ncap;
        }
        arr[cnt++] = f;
    }
    if (rc != MDB_NOTFOUND) {
        rv = store_err(rc, "list filters");
        goto err;
    }
    mdb_cursor_close(cur);
    *out = arr;
    *n = cnt;
    return 0;
err:
    mdb_cursor_close(cur);
    ctl_filters_free(arr, cnt);
    return rv;
}

void ctl_filter_release(struct ctl_filter *f)
{
    if (!f)
        return;
    free(f->regex);
    f->regex = NULL;
    free(f->label);
    f->label = NULL;
}

void ctl_filters_free(struct ctl_filter *fs, size_t n)
{
    if (!fs)
        return;
    for (size_t i = 0; i < n; i++)
        ctl_filter_release(&fs[i]);
    free(fs);
}

/* ---- counters and generations ---- */

int ctl_store_blocked_get(struct ctl_txn *t, uint32_t filter_id, uint64_t *out)
{
    uint8_t key[6];

    blocked_key(key, filter_id);
    return meta_u64_get(t, key, sizeof(key), out);
}

int ctl_store_blocked_add(struct ctl_txn *t, uint32_t filter_id, uint64_t delta)
{
    uint8_t key[6];
    uint64_t v;
    int rv;

    blocked_key(key, filter_id);
    rv = meta_u64_get(t, key, sizeof(key), &v);
    if (rv < 0)
        return rv;
    return meta_u64_put(t, key, sizeof(key), v + delta);
}

int ctl_store_blocked_set(struct ctl_txn *t, uint32_t filter_id, uint64_t v)
{
    uint8_t key[6];

    blocked_key(key, filter_id);
    return meta_u64_put(t, key, sizeof(key), v);
}

int ctl_store_matched_get(struct ctl_txn *t, uint32_t filter_id, uint64_t *out)
{
    uint8_t key[6];

    matched_key(key, filter_id);
    return meta_u64_get(t, key, sizeof(key), out);
}

int ctl_store_matched_set(struct ctl_txn *t, uint32_t filter_id, uint64_t v)
{
    uint8_t key[6];

    matched_key(key, filter_id);
    return meta_u64_put(t, key, sizeof(key), v);
}

int ctl_store_svc_totals_get(struct ctl_txn *t, uint32_t service_id, struct ctl_svc_totals *out)
{
    uint8_t key[6];
    MDB_val v;
    int rv;

    memset(out, 0, sizeof(*out));
    svc_totals_key(key, service_id);
    rv = rec_get(t, t->s->meta, key, sizeof(key), &v);
    if (rv == -ENOENT)
        return 0;
    if (rv < 0)
        return rv;
    if (v.mv_size != 32) {
        fgx_err("state store: a corrupt traffic total for service %u", service_id);
        return -EINVAL;
    }
    out->packets = be64_get(v.mv_data);
    out->bytes = be64_get((const uint8_t *)v.mv_data + 8);
    out->accepted = be64_get((const uint8_t *)v.mv_data + 16);
    out->dropped = be64_get((const uint8_t *)v.mv_data + 24);
    return 0;
}

int ctl_store_svc_totals_put(struct ctl_txn *t, uint32_t service_id, const struct ctl_svc_totals *v)
{
    uint8_t key[6], b[32];

    svc_totals_key(key, service_id);
    be64_put(b, v->packets);
    be64_put(b + 8, v->bytes);
    be64_put(b + 16, v->accepted);
    be64_put(b + 24, v->dropped);
    return rec_put(t, t->s->meta, key, sizeof(key), b, sizeof(b));
}

/* Named counters live under "n:" so that they can never meet a "b:"/"s:" id key. */
static int u64_key(const char *name, char *key, size_t len)
{
    if (snprintf(key, len, "n:%s", name) >= (int)len)
        return -ENAMETOOLONG;
    return 0;
}

int ctl_store_u64_get(struct ctl_txn *t, const char *name, uint64_t *out)
{
    char key[64];
    int rv = u64_key(name, key, sizeof(key));

    if (rv < 0)
        return rv;
    return meta_u64_get(t, key, strlen(key), out);
}

int ctl_store_u64_put(struct ctl_txn *t, const char *name, uint64_t v)
{
    char key[64];
    int rv = u64_key(name, key, sizeof(key));

    if (rv < 0)
        return rv;
    return meta_u64_put(t, key, strlen(key), v);
}

/* Text settings live under "t:", apart from the counters. */
static int text_key(const char *name, char *key, size_t len)
{
    if (snprintf(key, len, "t:%s", name) >= (int)len)
        return -ENAMETOOLONG;
    return 0;
}

int ctl_store_text_get(struct ctl_txn *t, const char *name, char *out, size_t len)
{
    char key[64];
    MDB_val v;
    int rv = text_key(name, key, sizeof(key));

    if (rv < 0)
        return rv;
    rv = rec_get(t, t->s->meta, key, strlen(key), &v);
    if (rv == -ENOENT) {
        out[0] = '\0';
        return 0;
    }
    if (rv < 0)
        return rv;
    if (v.mv_size >= len)
        return -EOVERFLOW;
    memcpy(out, v.mv_data, v.mv_size);
    out[v.mv_size] = '\0';
    return 0;
}

int ctl_store_text_put(struct ctl_txn *t, const char *name, const char *v)
{
    char key[64];
    int rv = text_key(name, key, sizeof(key));

    if (rv < 0)
        return rv;
    return rec_put(t, t->s->meta, key, strlen(key), v, strlen(v));
}

static int bytes_key(const char *name, char *key, size_t len)
{
    if (snprintf(key, len, "b:%s", name) >= (int)len)
        return -ENAMETOOLONG;
    return 0;
}

int ctl_store_bytes_get(struct ctl_txn *t, const char *name, void **out, size_t *len)
{
    char key[64];
    MDB_val v;
    int rv = bytes_key(name, key, sizeof(key));

    *out = NULL;
    *len = 0;
    if (rv < 0)
        return rv;
    rv = rec_get(t, t->s->meta, key, strlen(key), &v);
    if (rv == -ENOENT)
        return 0;
    if (rv < 0)
        return rv;
    *out = malloc(v.mv_size ? v.mv_size : 1);
    if (!*out)
        return -ENOMEM;
    memcpy(*out, v.mv_data, v.mv_size);
    *len = v.mv_size;
    return 0;
}

int ctl_store_bytes_put(struct ctl_txn *t, const char *name, const void *v, size_t len)
{
    char key[64];
    int rv = bytes_key(name, key, sizeof(key));

    return rv < 0 ? rv : rec_put(t, t->s->meta, key, strlen(key), v, len);
}

int ctl_store_bytes_del(struct ctl_txn *t, const char *name)
{
    char key[64];
    int rv = bytes_key(name, key, sizeof(key));

    if (rv < 0)
        return rv;
    rv = rec_del(t, t->s->meta, key, strlen(key));
    return rv == -ENOENT ? 0 : rv;
}

static int id_reserve(struct ctl_txn *t, const char *key, uint32_t used)
{
    uint64_t next;
    int rv = meta_u64_get(t, key, strlen(key), &next);

    if (rv < 0 || next > used)
        return rv;
    return meta_u64_put(t, key, strlen(key), (uint64_t)used + 1);
}

int ctl_store_ids_reserve(struct ctl_txn *t, uint32_t service_id, uint32_t filter_id)
{
    int rv = id_reserve(t, meta_next_service, service_id);

    if (rv == 0)
        rv = id_reserve(t, meta_next_filter, filter_id);
    return rv;
}

/* ---- match events ---- */

static int event_decode(const MDB_val *v, struct ctl_event *out)
{
    Fgx__Ctl__Event *m = fgx__ctl__event__unpack(NULL, v->mv_size, v->mv_data);
    int rv = -EINVAL;

    if (!m) {
        fgx_err("state store: an undecodable event record");
        return -EINVAL;
    }
    memset(out, 0, sizeof(*out));
    out->seq = m->seq;
    out->time_ns = m->time_ns;
    out->service_id = m->service_id;
    out->filter_id = m->filter_id;
    if (m->service &&
        snprintf(out->service, sizeof(out->service), "%s", m->service) >= (int)sizeof(out->service))
        goto out;
    out->dir = m->dir == FGX__CTL__DIR__DIR_S2C ? FGX_DIR_S2C : FGX_DIR_C2S;
    out->ipproto = m->proto == FGX__CTL__PROTO__PROTO_UDP ? IPPROTO_UDP : IPPROTO_TCP;
    if (snprintf(out->src, sizeof(out->src), "%s", m->src) >= (int)sizeof(out->src) ||
        snprintf(out->dst, sizeof(out->dst), "%s", m->dst) >= (int)sizeof(out->dst))
        goto out;
    if (m->sport > 65535 || m->dport > 65535)
        goto out;
    out->sport = (uint16_t)m->sport;
    out->dport = (uint16_t)m->dport;
    if (m->has_excerpt) {
        if (m->excerpt.len > sizeof(out->excerpt))
            goto out;
        out->excerpt_len = (uint8_t)m->excerpt.len;
        memcpy(out->excerpt, m->excerpt.data, m->excerpt.len);
    }
    /* Events stored before the excerpt had bytes after the match end end at it. */
    out->match_end = out->excerpt_len;
    if (m->has_match_end) {
        if (m->match_end > out->excerpt_len)
            goto out;
        out->match_end = (uint8_t)m->match_end;
    }
    out->log = m->has_log && m->log;
    out->h2_stream = m->has_h2_stream ? m->h2_stream : 0;
    out->edge = (uint8_t)(m->has_edge && m->edge <= FGX_EDGE_MAX ? m->edge : 0);
    if (m->flag_sha256 && strlen(m->flag_sha256) == 64)
        memcpy(out->flag_sha256, m->flag_sha256, 65);
    out->flag_offset = m->has_flag_offset ? m->flag_offset : 0;
    if (m->script_kind) {
        (void)snprintf(out->script_kind, sizeof(out->script_kind), "%s", m->script_kind);
        (void)snprintf(out->script_fn, sizeof(out->script_fn), "%s",
                       m->script_function ? m->script_function : "");
    }
    rv = 0;
out:
    if (rv < 0)
        fgx_err("state store: a corrupt event record (seq %llu)", (unsigned long long)m->seq);
    fgx__ctl__event__free_unpacked(m, NULL);
    return rv;
}

int ctl_store_event_put(struct ctl_txn *t, const struct ctl_event *e)
{
    Fgx__Ctl__Event m = FGX__CTL__EVENT__INIT;
    uint8_t key[8], buf[512];
    size_t len;

    m.seq = e->seq;
    m.time_ns = e->time_ns;
    m.service_id = e->service_id;
    m.service = (char *)e->service;
    m.filter_id = e->filter_id;
    m.dir = e->dir == FGX_DIR_S2C ? FGX__CTL__DIR__DIR_S2C : FGX__CTL__DIR__DIR_C2S;
    m.proto = e->ipproto == IPPROTO_UDP ? FGX__CTL__PROTO__PROTO_UDP : FGX__CTL__PROTO__PROTO_TCP;
    m.src = (char *)e->src;
    m.sport = e->sport;
    m.dst = (char *)e->dst;
    m.dport = e->dport;
    if (e->excerpt_len > 0) {
        m.has_excerpt = 1;
        m.excerpt.data = (uint8_t *)e->excerpt;
        m.excerpt.len = e->excerpt_len;
    }
    m.has_match_end = 1;
    m.match_end = e->match_end;
    if (e->log) {
        m.has_log = 1;
        m.log = 1;
    }
    m.has_h2_stream = e->h2_stream != 0;
    m.h2_stream = e->h2_stream;
    m.has_edge = e->edge != 0;
    m.edge = e->edge;
    if (e->flag_sha256[0]) {
        m.flag_sha256 = (char *)e->flag_sha256;
        m.has_flag_offset = 1;
        m.flag_offset = e->flag_offset;
    }
    if (e->script_kind[0]) {
        m.script_kind = (char *)e->script_kind;
        m.script_function = (char *)e->script_fn;
    }
    len = fgx__ctl__event__get_packed_size(&m);
    if (len > sizeof(buf))
        return -EINVAL;
    fgx__ctl__event__pack(&m, buf);
    be64_put(key, e->seq);
    return rec_put(t, t->s->events, key, sizeof(key), buf, len);
}

int ctl_store_event_list(struct ctl_txn *t, size_t newest, struct ctl_event **out, size_t *n)
{
    struct ctl_event *arr = NULL;
    MDB_cursor *cur = NULL;
    size_t cnt = 0;
    MDB_val k, v;
    int rv, rc;

    *out = NULL;
    *n = 0;
    if (newest == 0)
        return 0;
    arr = calloc(newest, sizeof(*arr));
    if (!arr)
        return -ENOMEM;
    rv = store_err(mdb_cursor_open(t->txn, t->s->events, &cur), "cursor");
    if (rv < 0)
        goto err;
    /* Walk back from the newest, then fill the array from its end: oldest first. */
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_LAST); rc == 0 && cnt < newest;
         rc = mdb_cursor_get(cur, &k, &v, MDB_PREV)) {
        rv = event_decode(&v, &arr[newest - 1 - cnt]);
        if (rv < 0)
            goto err;
        cnt++;
    }
    if (rc != 0 && rc != MDB_NOTFOUND) {
        rv = store_err(rc, "list events");
        goto err;
    }
    mdb_cursor_close(cur);
    if (cnt < newest)
        memmove(arr, arr + (newest - cnt), cnt * sizeof(*arr));
    *out = arr;
    *n = cnt;
    return 0;
err:
    mdb_cursor_close(cur);
    free(arr);
    return rv;
}

/* Keep the newest keep records of dbi (keys in time order): the oldest go first. */
static int dbi_trim(struct ctl_txn *t, MDB_dbi dbi, size_t keep, const char *what)
{
    char msg[48];
    MDB_cursor *cur;
    MDB_stat st;
    MDB_val k, v;
    size_t drop;
    int rv, rc;

    snprintf(msg, sizeof(msg), "count %s", what);
    rv = store_err(mdb_stat(t->txn, dbi, &st), msg);
    if (rv < 0 || st.ms_entries <= keep)
        return rv;
    drop = st.ms_entries - keep;
    rv = store_err(mdb_cursor_open(t->txn, dbi, &cur), "cursor");
    if (rv < 0)
        return rv;
    /* Oldest first; after a delete, MDB_NEXT yields the record that followed it. */
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && drop > 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        rc = mdb_cursor_del(cur, 0);
        if (rc != 0)
            break;
        drop--;
    }
    snprintf(msg, sizeof(msg), "trim %s", what);
    if (rc != 0 && rc != MDB_NOTFOUND)
        rv = store_err(rc, msg);
    mdb_cursor_close(cur);
    return rv;
}

int ctl_store_event_trim(struct ctl_txn *t, size_t keep)
{
    return dbi_trim(t, t->s->events, keep, "events");
}

int ctl_store_generation_next(struct ctl_txn *t, uint64_t *out)
{
    uint64_t v;
    int rv = meta_u64_get(t, meta_generation, strlen(meta_generation), &v);

    if (rv < 0)
        return rv;
    v++;
    rv = meta_u64_put(t, meta_generation, strlen(meta_generation), v);
    if (rv == 0)
        *out = v;
    return rv;
}

/* ---- compiled database cache ---- */

int ctl_store_dbcache_get(struct ctl_txn *t, uint64_t key, struct fgx_blob *out)
{
    uint8_t k[8];
    MDB_val v;
    int rv;

    be64_put(k, key);
    rv = rec_get(t, t->s->dbcache, k, sizeof(k), &v);
    if (rv < 0)
        return rv;
    if (v.mv_size == 0)
        return -ENOENT;
    out->data = malloc(v.mv_size);
    if (!out->data)
        return -ENOMEM;
    memcpy(out->data, v.mv_data, v.mv_size);
    out->len = v.mv_size;
    out->hash = key;
    return 0;
}

int ctl_store_dbcache_put(struct ctl_txn *t, uint64_t key, const struct fgx_blob *b)
{
    uint8_t k[8];

    if (b->len == 0)
        return -EINVAL;
    be64_put(k, key);
    return rec_put(t, t->s->dbcache, k, sizeof(k), b->data, b->len);
}

int ctl_store_dbcache_keep(struct ctl_txn *t, const uint64_t *keys, size_t n)
{
    MDB_cursor *cur;
    MDB_val k, v;
    int rv, rc;

    rv = store_err(mdb_cursor_open(t->txn, t->s->dbcache, &cur), "cursor");
    if (rv < 0)
        return rv;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        bool keep = false;

        if (k.mv_size == 8) {
            uint64_t key = be64_get(k.mv_data);
            for (size_t i = 0; i < n && !keep; i++)
                keep = keys[i] == key;
        }
        if (!keep) {
            rc = mdb_cursor_del(cur, 0);
            if (rc != 0)
                break;
        }
    }
    if (rc != MDB_NOTFOUND)
        rv = store_err(rc, "prune dbcache");
    mdb_cursor_close(cur);
    return rv;
}

/* ---- blocks of removed filters, per service ---- */

static void retired_key(uint8_t key[6], uint32_t service_id)
{
    key[0] = 'r';
    key[1] = ':';
    be32_put(key + 2, service_id);
}

int ctl_store_retired_get(struct ctl_txn *t, uint32_t service_id, uint64_t *out)
{
    uint8_t key[6];

    retired_key(key, service_id);
    return meta_u64_get(t, key, sizeof(key), out);
}

int ctl_store_retired_set(struct ctl_txn *t, uint32_t service_id, uint64_t v)
{
    uint8_t key[6];
    int rv;

    retired_key(key, service_id);
    if (v != 0)
        return meta_u64_put(t, key, sizeof(key), v);
    rv = rec_del(t, t->s->meta, key, sizeof(key));
    return rv == -ENOENT ? 0 : rv;
}

/* ---- change history and per-minute rates: opaque records ---- */

static int blob_copy(const MDB_val *v, void **out, size_t *len)
{
    *out = malloc(v->mv_size ? v->mv_size : 1);
    if (!*out)
        return -ENOMEM;
    memcpy(*out, v->mv_data, v->mv_size);
    *len = v->mv_size;
    return 0;
}

int ctl_store_history_put(struct ctl_txn *t, uint64_t seq, const void *data, size_t len)
{
    uint8_t key[8];

    be64_put(key, seq);
    return rec_put(t, t->s->history, key, sizeof(key), data, len);
}

int ctl_store_history_get(struct ctl_txn *t, uint64_t seq, void **out, size_t *len)
{
    uint8_t key[8];
    MDB_val v;
    int rv;

    be64_put(key, seq);
    rv = rec_get(t, t->s->history, key, sizeof(key), &v);
    return rv < 0 ? rv : blob_copy(&v, out, len);
}

int ctl_store_history_seqs(struct ctl_txn *t, uint64_t **out, size_t *n)
{
    MDB_cursor *cur;
    uint64_t *arr = NULL;
    size_t cnt = 0, cap = 0;
    MDB_val k, v;
    int rv, rc;

    *out = NULL;
    *n = 0;
    rv = store_err(mdb_cursor_open(t->txn, t->s->history, &cur), "cursor");
    if (rv < 0)
        return rv;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 8)
            continue;
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            uint64_t *na = realloc(arr, ncap * sizeof(*na));
            if (!na) {
                rv = -ENOMEM;
                break;
            }
            arr = na;
            cap = ncap;
        }
        arr[cnt++] = be64_get(k.mv_data);
    }
    if (rv == 0 && rc != MDB_NOTFOUND)
        rv = store_err(rc, "list history");
    mdb_cursor_close(cur);
    if (rv < 0) {
        free(arr);
        return rv;
    }
    *out = arr;
    *n = cnt;
    return 0;
}

int ctl_store_history_del(struct ctl_txn *t, uint64_t seq)
{
    uint8_t key[8];

    be64_put(key, seq);
    return rec_del(t, t->s->history, key, sizeof(key));
}

int ctl_store_rates_get(struct ctl_txn *t, const uint8_t key[CTL_RATES_KEY_LEN], void **out,
                        size_t *len)
{
    MDB_val v;
    int rv = rec_get(t, t->s->rates, key, CTL_RATES_KEY_LEN, &v);

    return rv < 0 ? rv : blob_copy(&v, out, len);
}

int ctl_store_rates_put(struct ctl_txn *t, const uint8_t key[CTL_RATES_KEY_LEN], const void *data,
                        size_t len)
{
    int rv;

    if (len > 0)
        return rec_put(t, t->s->rates, key, CTL_RATES_KEY_LEN, data, len);
    rv = rec_del(t, t->s->rates, key, CTL_RATES_KEY_LEN);
    return rv == -ENOENT ? 0 : rv;
}

int ctl_store_rates_keys(struct ctl_txn *t, uint8_t (**out)[CTL_RATES_KEY_LEN], size_t *n)
{
    uint8_t(*arr)[CTL_RATES_KEY_LEN] = NULL;
    size_t cnt = 0, cap = 0;
    MDB_cursor *cur;
    MDB_val k, v;
    int rv, rc;

    *out = NULL;
    *n = 0;
    rv = store_err(mdb_cursor_open(t->txn, t->s->rates, &cur), "cursor");
    if (rv < 0)
        return rv;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != CTL_RATES_KEY_LEN)
            continue;
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            void *na = realloc(arr, ncap * sizeof(*arr));
            if (!na) {
                rv = -ENOMEM;
                break;
            }
            arr = na;
            cap = ncap;
        }
        memcpy(arr[cnt++], k.mv_data, CTL_RATES_KEY_LEN);
    }
    if (rv == 0 && rc != MDB_NOTFOUND)
        rv = store_err(rc, "list rates");
    mdb_cursor_close(cur);
    if (rv < 0) {
        free(arr);
        return rv;
    }
    *out = arr;
    *n = cnt;
    return 0;
}

/* ---- blocked connections' captures, keyed by their event's seq ---- */

int ctl_store_capture_put(struct ctl_txn *t, uint64_t seq, const void *data, size_t len)
{
    uint8_t key[8];

    be64_put(key, seq);
    return rec_put(t, t->s->captures, key, sizeof(key), data, len);
}

int ctl_store_capture_get(struct ctl_txn *t, uint64_t seq, void **data, size_t *len)
{
    uint8_t key[8];
    MDB_val v;
    int rv;

    be64_put(key, seq);
    rv = rec_get(t, t->s->captures, key, sizeof(key), &v);
    if (rv < 0)
        return rv;
    *data = malloc(v.mv_size ? v.mv_size : 1);
    if (*data == NULL)
        return -ENOMEM;
    memcpy(*data, v.mv_data, v.mv_size);
    *len = v.mv_size;
    return 0;
}

int ctl_store_capture_each(struct ctl_txn *t, ctl_store_capture_fn fn, void *arg)
{
    MDB_cursor *cur;
    MDB_val k, v;
    int rv, rc;

    rv = store_err(mdb_cursor_open(t->txn, t->s->captures, &cur), "cursor");
    if (rv < 0)
        return rv;
    /* Newest first. */
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_LAST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_PREV)) {
        if (k.mv_size != 8)
            continue;
        rv = fn(arg, be64_get(k.mv_data), v.mv_data, v.mv_size);
        if (rv != 0)
            break;
    }
    if (rv == 0 && rc != MDB_NOTFOUND)
        rv = store_err(rc, "list captures");
    mdb_cursor_close(cur);
    return rv > 0 ? 0 : rv;
}

int ctl_store_capture_trim(struct ctl_txn *t, size_t keep)
{
    return dbi_trim(t, t->s->captures, keep, "captures");
}

/* ---- script filter files (one record per service, opaque here) ---- */

int ctl_store_script_get(struct ctl_txn *t, uint32_t service_id, void **data, size_t *len)
{
    uint8_t k[4];
    MDB_val v;
    int rv;

    be32_put(k, service_id);
    rv = rec_get(t, t->s->scripts, k, sizeof(k), &v);
    if (rv < 0)
        return rv;
    *data = malloc(v.mv_size ? v.mv_size : 1);
    if (!*data)
        return -ENOMEM;
    memcpy(*data, v.mv_data, v.mv_size);
    *len = v.mv_size;
    return 0;
}

int ctl_store_script_put(struct ctl_txn *t, uint32_t service_id, const void *data, size_t len)
{
    uint8_t k[4];

    be32_put(k, service_id);
    return rec_put(t, t->s->scripts, k, sizeof(k), data, len);
}

int ctl_store_script_del(struct ctl_txn *t, uint32_t service_id)
{
    uint8_t k[4];

    be32_put(k, service_id);
    return rec_del(t, t->s->scripts, k, sizeof(k));
}

int ctl_store_script_ids(struct ctl_txn *t, uint32_t **ids, size_t *n)
{
    MDB_cursor *cur;
    MDB_val k, v;
    uint32_t *out = NULL, *grown;
    size_t cnt = 0, cap = 0;
    int rv, rc;

    *ids = NULL;
    *n = 0;
    rv = store_err(mdb_cursor_open(t->txn, t->s->scripts, &cur), "cursor");
    if (rv < 0)
        return rv;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 4)
            continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 8;
            grown = realloc(out, cap * sizeof(*out));
            if (!grown) {
                rv = -ENOMEM;
                break;
            }
            out = grown;
        }
        out[cnt++] = be32_get((const uint8_t *)k.mv_data);
    }
    if (rv == 0 && rc != MDB_NOTFOUND)
        rv = store_err(rc, "list scripts");
    mdb_cursor_close(cur);
    if (rv < 0) {
        free(out);
        return rv;
    }
    *ids = out;
    *n = cnt;
    return 0;
}

/* ---- the health log (ctl_health.h) ---- */

int ctl_store_health_put(struct ctl_txn *t, const struct ctl_health_entry *e)
{
    Fgx__Ctl__HealthEntry m = FGX__CTL__HEALTH_ENTRY__INIT;
    uint8_t key[12], buf[CTL_HEALTH_TEXT_MAX + CTL_HEALTH_KIND_MAX + 64];
    size_t len;

    m.seq = e->seq;
    m.time_ns = e->time_ns;
    m.has_service_id = 1;
    m.service_id = e->service_id;
    m.level = (char *)ctl_health_level_name(e->level);
    m.kind = (char *)e->kind;
    m.text = (char *)e->text;
    if (e->count > 0) {
        m.has_count = 1;
        m.count = e->count;
    }
    len = fgx__ctl__health_entry__get_packed_size(&m);
    if (len > sizeof(buf))
        return -EINVAL;
    fgx__ctl__health_entry__pack(&m, buf);
    be32_put(key, e->service_id);
    be64_put(key + 4, e->seq);
    return rec_put(t, t->s->health_log, key, sizeof(key), buf, len);
}

static int health_decode(const MDB_val *v, struct ctl_health_entry *out)
{
    Fgx__Ctl__HealthEntry *m = fgx__ctl__health_entry__unpack(NULL, v->mv_size, v->mv_data);

    if (!m) {
        fgx_err("state store: a corrupt health log record");
        return -EINVAL;
    }
    memset(out, 0, sizeof(*out));
    out->seq = m->seq;
    out->time_ns = m->time_ns;
    out->service_id = m->service_id;
    out->level = ctl_health_level_of(m->level);
    snprintf(out->kind, sizeof(out->kind), "%s", m->kind ? m->kind : "");
    snprintf(out->text, sizeof(out->text), "%s", m->text ? m->text : "");
    out->count = m->count;
    fgx__ctl__health_entry__free_unpacked(m, NULL);
    return 0;
}

static int health_seq_cmp(const void *a, const void *b)
{
    const struct ctl_health_entry *x = a, *y = b;

    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int ctl_store_health_list(struct ctl_txn *t, struct ctl_health_entry **out, size_t *n)
{
    struct ctl_health_entry *arr = NULL, *grown;
    size_t cnt = 0, cap = 0;
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    int rv, rc;

    *out = NULL;
    *n = 0;
    rv = store_err(mdb_cursor_open(t->txn, t->s->health_log, &cur), "cursor");
    if (rv < 0)
        return rv;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (cnt == cap) {
            cap = cap ? cap * 2 : 64;
            grown = realloc(arr, cap * sizeof(*arr));
            if (!grown) {
                rv = -ENOMEM;
                goto err;
            }
            arr = grown;
        }
        /* a corrupt record is skipped (and logged): the others still count */
        if (health_decode(&v, &arr[cnt]) == 0)
            cnt++;
    }
    if (rc != MDB_NOTFOUND) {
        rv = store_err(rc, "list the health log");
        goto err;
    }
    mdb_cursor_close(cur);
    if (cnt > 1) /* qsort of NULL, even of none, is undefined */
        qsort(arr, cnt, sizeof(*arr), health_seq_cmp);
    *out = arr;
    *n = cnt;
    return 0;
err:
    mdb_cursor_close(cur);
    free(arr);
    return rv;
}

int ctl_store_health_trim(struct ctl_txn *t, uint32_t service_id, size_t keep)
{
    uint8_t key[12] = {0};
    MDB_cursor *cur;
    MDB_val k = {.mv_size = sizeof(key), .mv_data = key}, v;
    size_t have = 0, drop;
    int rv, rc;

    be32_put(key, service_id);
    rv = store_err(mdb_cursor_open(t->txn, t->s->health_log, &cur), "cursor");
    if (rv < 0)
        return rv;
    /* The service's records are one run of keys, oldest first: count them, then drop the
     * oldest beyond keep. */
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
         rc == 0 && k.mv_size == sizeof(key) && be32_get(k.mv_data) == service_id;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        have++;
    if (rc != 0 && rc != MDB_NOTFOUND) {
        rv = store_err(rc, "count the health log");
        goto out;
    }
    if (have <= keep)
        goto out;
    drop = have - keep;
    k.mv_size = sizeof(key);
    k.mv_data = key;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
         rc == 0 && drop > 0 && k.mv_size == sizeof(key) && be32_get(k.mv_data) == service_id;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        rc = mdb_cursor_del(cur, 0);
        if (rc != 0)
            break;
        drop--;
    }
    if (rc != 0 && rc != MDB_NOTFOUND)
        rv = store_err(rc, "trim the health log");
out:
    mdb_cursor_close(cur);
    return rv;
}
