/* controld statistics stage, per-minute rates (ctl_rates.h). A record is big-endian
 * (minute u32, count u32) pairs, ascending by minute; a minute's count saturates at
 * UINT32_MAX. */
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

void ctl_rates_key(uint8_t key[CTL_RATES_KEY_LEN], enum ctl_rate_kind kind, enum ctl_rate_obj obj,
                   uint32_t id)
{
    key[0] = (uint8_t)kind;
    key[1] = (uint8_t)obj;
    put32(key + 2, id);
}

int ctl_rates_decode(const void *rec, size_t len, struct ctl_rate_point **out, size_t *n)
{
    const uint8_t *p = rec;
    size_t cnt = len / 8;

    *out = NULL;
    *n = 0;
    if (len % 8 != 0)
        return -EINVAL;
    if (cnt == 0)
        return 0;
    *out = malloc(cnt * sizeof(**out));
    if (!*out)
        return -ENOMEM;
    for (size_t i = 0; i < cnt; i++) {
        (*out)[i].minute = get32(p + 8 * i);
        (*out)[i].count = get32(p + 8 * i + 4);
    }
    *n = cnt;
    return 0;
}

/* Append a point unless it is out of the window or empty. */
static void emit(uint8_t *buf, size_t *k, uint32_t minute, uint32_t count, uint32_t oldest)
{
    if (minute < oldest || count == 0)
        return;
    put32(buf + 8 * *k, minute);
    put32(buf + 8 * *k + 4, count);
    (*k)++;
}

int ctl_rates_merge(const void *rec, size_t len, uint32_t minute, uint64_t count,
                    uint32_t now_minute, void **out, size_t *outlen)
{
    uint32_t oldest = now_minute >= CTL_RATES_MINUTES ? now_minute - CTL_RATES_MINUTES + 1 : 0;
    struct ctl_rate_point *pts = NULL;
    size_t n = 0, k = 0, i = 0;
    uint64_t c = count;
    uint8_t *buf;
    int rv;

    *out = NULL;
    *outlen = 0;
    rv = ctl_rates_decode(rec, len, &pts, &n);
    if (rv < 0)
        return rv;
    buf = malloc((n + 1) * 8);
    if (!buf) {
        free(pts);
        return -ENOMEM;
    }
    for (; i < n && pts[i].minute < minute; i++)
        emit(buf, &k, pts[i].minute, pts[i].count, oldest);
    if (i < n && pts[i].minute == minute)
        c += pts[i++].count;
    emit(buf, &k, minute, c > UINT32_MAX ? UINT32_MAX : (uint32_t)c, oldest);
    for (; i < n; i++)
        emit(buf, &k, pts[i].minute, pts[i].count, oldest);
    free(pts);
    if (k == 0) {
        free(buf);
        return 0;
    }
    *out = buf;
    *outlen = k * 8;
    return 0;
}

int ctl_rates_note(struct ctl_rates_pending *p, enum ctl_rate_kind kind, uint32_t filter_id,
                   uint32_t service_id, uint32_t minute, uint64_t count)
{
    for (size_t i = 0; i < p->n; i++) {
        struct ctl_rates_entry *e = &p->v[i];

        if (e->kind == kind && e->filter_id == filter_id && e->minute == minute) {
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
    rv = ctl_rates_merge(rec, len, minute, count, now_minute, &nrec, &nlen);
    if (rv == -EINVAL) /* a corrupt series starts again rather than stop the counters' flush */
        rv = ctl_rates_merge(NULL, 0, minute, count, now_minute, &nrec, &nlen);
    if (rv == 0)
        rv = ctl_store_rates_put(t, key, nrec, nlen);
    free(rec);
    free(nrec);
    return rv;
}

int ctl_rates_flush(struct ctl_rates_pending *p, struct ctl_txn *t, uint32_t now_minute,
                    uint32_t (*svc_of)(void *arg, uint32_t filter_id), void *arg)
{
    int rv = 0;

    for (size_t i = 0; rv == 0 && i < p->n; i++) {
        struct ctl_rates_entry *e = &p->v[i];
        uint32_t sid = e->service_id;

        if (sid == 0) {
            struct ctl_filter f;

            if (ctl_store_filter_get(t, e->filter_id, &f) == 0) {
                sid = f.service_id;
                ctl_filter_release(&f);
            } else if (svc_of) {
                sid = svc_of(arg, e->filter_id);
            }
        }
        rv = series_add(t, (enum ctl_rate_kind)e->kind, CTL_RATE_FILTER, e->filter_id, e->minute,
                        e->count, now_minute);
        if (rv == 0 && sid)
            rv = series_add(t, (enum ctl_rate_kind)e->kind, CTL_RATE_SERVICE, sid, e->minute,
                            e->count, now_minute);
    }
    if (rv == 0)
        p->n = 0;
    return rv;
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
            rv = ctl_rates_merge(rec, len, 0, 0, now_minute, &nrec, &nlen);
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
    rv = ctl_rates_decode(rec, len, &pts, &np);
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
