/* controld statistics stage, per-minute rates (ctl_rates.h). A record is big-endian
 * (minute u32, count u32) pairs, ascending by minute, or (minute u32, count u64) for the byte
 * kinds (ctl_rates_point_len()); a minute's count saturates. The kind is the key's first byte,
 * so a record's width is known from its key. */
#include "controld/ctl_rates.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A point's count: 4 or 8 bytes (w: the point's length, 8 or 12). */
static void put_count(uint8_t *p, size_t w, uint64_t v)
{
    if (w == 12) {
        put32(p, (uint32_t)(v >> 32));
        put32(p + 4, (uint32_t)v);
    } else {
        put32(p, (uint32_t)v);
    }
}

static uint64_t get_count(const uint8_t *p, size_t w)
{
    return w == 12 ? (uint64_t)get32(p) << 32 | get32(p + 4) : get32(p);
}

void ctl_rates_key(uint8_t key[CTL_RATES_KEY_LEN], enum ctl_rate_kind kind, enum ctl_rate_obj obj,
                   uint32_t id)
{
    key[0] = (uint8_t)kind;
    key[1] = (uint8_t)obj;
    put32(key + 2, id);
}

int ctl_rates_decode(enum ctl_rate_kind kind, const void *rec, size_t len,
                     struct ctl_rate_point **out, size_t *n)
{
    size_t w = ctl_rates_point_len(kind), cnt = len / w;
    const uint8_t *p = rec;

    *out = NULL;
    *n = 0;
    if (len % w != 0)
        return -EINVAL;
    if (cnt == 0)
        return 0;
    *out = malloc(cnt * sizeof(**out));
    if (!*out)
        return -ENOMEM;
    for (size_t i = 0; i < cnt; i++) {
        (*out)[i].minute = get32(p + w * i);
        (*out)[i].count = get_count(p + w * i + 4, w);
    }
    *n = cnt;
    return 0;
}

/* Append a point of w bytes unless it is out of the window or empty. */
static void emit(uint8_t *buf, size_t w, size_t *k, uint32_t minute, uint64_t count,
                 uint32_t oldest)
{
    if (minute < oldest || count == 0)
        return;
    put32(buf + w * *k, minute);
    put_count(buf + w * *k + 4, w, count);
    (*k)++;
}

int ctl_rates_merge(enum ctl_rate_kind kind, const void *rec, size_t len, uint32_t minute,
                    uint64_t count, uint32_t now_minute, void **out, size_t *outlen)
{
    size_t w = ctl_rates_point_len(kind);
    uint64_t max = w == 12 ? UINT64_MAX : UINT32_MAX;
    uint32_t oldest = now_minute >= CTL_RATES_MINUTES ? now_minute - CTL_RATES_MINUTES + 1 : 0;
    struct ctl_rate_point *pts = NULL;
    size_t n = 0, k = 0, i = 0;
    uint64_t c = count;
    uint8_t *buf;
    int rv;

    *out = NULL;
    *outlen = 0;
    rv = ctl_rates_decode(kind, rec, len, &pts, &n);
    if (rv < 0)
        return rv;
    buf = malloc((n + 1) * w);
    if (!buf) {
        free(pts);
        return -ENOMEM;
    }
    if (c > max)
        c = max;
    for (; i < n && pts[i].minute < minute; i++)
        emit(buf, w, &k, pts[i].minute, pts[i].count, oldest);
    if (i < n && pts[i].minute == minute) {
        c = pts[i].count > max - c ? max : c + pts[i].count;
        i++;
    }
    emit(buf, w, &k, minute, c, oldest);
    for (; i < n; i++)
        emit(buf, w, &k, pts[i].minute, pts[i].count, oldest);
    free(pts);
    if (k == 0) {
        free(buf);
        return 0;
    }
    *out = buf;
    *outlen = k * w;
    return 0;
}

int ctl_rates_note(struct ctl_rates_pending *p, enum ctl_rate_kind kind, uint32_t filter_id,
                   uint32_t service_id, uint32_t minute, uint64_t count)
{
    for (size_t i = 0; i < p->n; i++) {
        struct ctl_rates_entry *e = &p->v[i];

        /* filter_id 0: a service's traffic, one entry per service */
        if (e->kind == kind && e->filter_id == filter_id && e->minute == minute &&
            (filter_id != 0 || e->service_id == service_id)) {
            e->count += count;
            if (service_id)
                e->service_id = service_id;
            return 0;
        }
    }
    if (p->n == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 16;
        struct ctl_rates_entry *nv = realloc(p->v, ncap * sizeof(*nv));

        if (!nv)
            return -ENOMEM;
        p->v = nv;
        p->cap = ncap;
    }
    p->v[p->n++] = (struct ctl_rates_entry){.kind = (uint8_t)kind,
                                            .filter_id = filter_id,
                                            .service_id = service_id,
                                            .minute = minute,
                                            .count = count};
    return 0;
}

int ctl_rates_note_service(struct ctl_rates_pending *p, enum ctl_rate_kind kind,
                           uint32_t service_id, uint32_t minute, uint64_t count)
{
    if (service_id == 0)
        return 0;
    return ctl_rates_note(p, kind, 0, service_id, minute, count);
}

static int series_add(struct ctl_txn *t, enum ctl_rate_kind kind, enum ctl_rate_obj obj,
                      uint32_t id, uint32_t minute, uint64_t count, uint32_t now_minute)
{
    uint8_t key[CTL_RATES_KEY_LEN];
    void *rec = NULL, *nrec = NULL;
    size_t len = 0, nlen = 0;
    int rv;

    ctl_rates_key(key, kind, obj, id);
    rv = ctl_store_rates_get(t, key, &rec, &len);
    if (rv == -ENOENT)
        rv = 0;
    if (rv < 0)
        return rv;
    rv = ctl_rates_merge(kind, rec, len, minute, count, now_minute, &nrec, &nlen);
    if (rv == -EINVAL) /* a corrupt series starts again rather than stop the counters' flush */
        rv = ctl_rates_merge(kind, NULL, 0, minute, count, now_minute, &nrec, &nlen);
    if (rv == 0)
        rv = ctl_store_rates_put(t, key, nrec, nlen);
    free(rec);
    free(nrec);
    return rv;
}

int ctl_rates_flush(struct ctl_rates_pending *p, struct ctl_txn *t, uint32_t now_minute, bool all,
                    uint32_t (*svc_of)(void *arg, uint32_t filter_id), void *arg)
{
    size_t keep = 0;
    int rv = 0;

    for (size_t i = 0; rv == 0 && i < p->n; i++) {
        struct ctl_rates_entry *e = &p->v[i];
        enum ctl_rate_kind kind = (enum ctl_rate_kind)e->kind;
        uint32_t sid = e->service_id;

        if (ctl_rates_traffic(kind)) {
            /* Its minute still grows: one write when it is over, not one per flush. */
            if (!all && e->minute >= now_minute)
                continue;
            rv = series_add(t, kind, CTL_RATE_SERVICE, sid, e->minute, e->count, now_minute);
            continue;
        }
        if (sid == 0) {
            struct ctl_filter f;

            if (ctl_store_filter_get(t, e->filter_id, &f) == 0) {
                sid = f.service_id;
                ctl_filter_release(&f);
            } else if (svc_of) {
                sid = svc_of(arg, e->filter_id);
            }
        }
        rv = series_add(t, kind, CTL_RATE_FILTER, e->filter_id, e->minute, e->count, now_minute);
        if (rv == 0 && sid)
            rv = series_add(t, kind, CTL_RATE_SERVICE, sid, e->minute, e->count, now_minute);
    }
    if (rv < 0)
        return rv; /* the caller's transaction is aborted: everything stays pending */
    for (size_t i = 0; i < p->n; i++)
        if (!all && ctl_rates_traffic((enum ctl_rate_kind)p->v[i].kind) &&
            p->v[i].minute >= now_minute)
            p->v[keep++] = p->v[i];
    p->n = keep;
    return 0;
}

int ctl_rates_prune(struct ctl_txn *t, uint32_t now_minute)
{
    uint8_t(*keys)[CTL_RATES_KEY_LEN] = NULL;
    size_t n = 0;
    int rv = ctl_store_rates_keys(t, &keys, &n);

    for (size_t i = 0; rv == 0 && i < n; i++) {
        void *rec = NULL, *nrec = NULL;
        size_t len = 0, nlen = 0;

        rv = ctl_store_rates_get(t, keys[i], &rec, &len);
        if (rv == 0)
            rv = ctl_rates_merge((enum ctl_rate_kind)keys[i][0], rec, len, 0, 0, now_minute, &nrec,
                                 &nlen);
        if (rv == -EINVAL) {
            nlen = 0; /* corrupt: dropped */
            rv = 0;
        }
        if (rv == 0 && nlen != len)
            rv = ctl_store_rates_put(t, keys[i], nrec, nlen);
        free(rec);
        free(nrec);
    }
    free(keys);
    return rv;
}

int ctl_rates_get(struct ctl_txn *t, enum ctl_rate_kind kind, enum ctl_rate_obj obj, uint32_t id,
                  uint32_t since_minute, struct ctl_rate_point **out, size_t *n)
{
    uint8_t key[CTL_RATES_KEY_LEN];
    struct ctl_rate_point *pts = NULL;
    size_t np = 0, k = 0;
    void *rec = NULL;
    size_t len = 0;
    int rv;

    *out = NULL;
    *n = 0;
    ctl_rates_key(key, kind, obj, id);
    rv = ctl_store_rates_get(t, key, &rec, &len);
    if (rv == -ENOENT)
        return 0;
    if (rv < 0)
        return rv;
    rv = ctl_rates_decode(kind, rec, len, &pts, &np);
    free(rec);
    if (rv < 0)
        return rv;
    for (size_t i = 0; i < np; i++)
        if (pts[i].minute >= since_minute)
            pts[k++] = pts[i];
    if (k == 0) {
        free(pts);
        return 0;
    }
    *out = pts;
    *n = k;
    return 0;
}

void ctl_rates_pending_release(struct ctl_rates_pending *p)
{
    free(p->v);
    memset(p, 0, sizeof(*p));
}
