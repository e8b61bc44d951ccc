/* bench/scan: the ruleset compiler and hyperscan alone, no network (bench stage). For each
 * pattern count: the compile time of fgx_ruleset_compile() (what controld pays per change) and
 * the scan rate of one core over random data, in stream mode (TCP: one stream fed in
 * segment-sized writes) and block mode (UDP: one scan per datagram-sized chunk). Prints the
 * median and range over passes and writes every pass to CSV.
 *
 *   scan [-r 1,10,100,1000,10000] [--passes N] [--mib M] [--chunk B] [--mode stream|block|both]
 *        [-o CSV] [--seed S] */
#include <errno.h>
#include <hs.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fgx/log.h"
#include "fgx/ruleset.h"

#define MAX_COUNTS 32
#define MAX_PASSES 64
#define DATA_LEN (16u << 20)

struct result {
    double compile_ms, gbps;
    size_t db_bytes;
    unsigned long long matches;
};

static uint64_t g_rng;

static uint64_t rng_next(void)
{
    /* xorshift64*: deterministic for a seed, enough for patterns and filler. */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 2685821657736338717ull;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Same shape as bench/fgxbench.py never_patterns(): 8 random alphanumerics, a bounded digit
 * run, 4 random lowercase letters. */
static char **make_patterns(size_t n)
{
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    char **p = calloc(n ? n : 1, sizeof(*p));

    if (!p)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        char s[32];
        int k = 0;

        for (int j = 0; j < 8; j++)
            s[k++] = alnum[rng_next() % 62];
        memcpy(s + k, "[0-9]{1,3}", 10);
        k += 10;
        for (int j = 0; j < 4; j++)
            s[k++] = (char)('a' + rng_next() % 26);
        s[k] = '\0';
        p[i] = strdup(s);
        if (!p[i])
            return NULL;
    }
    return p;
}

static int on_match(unsigned int id, unsigned long long from, unsigned long long to,
                    unsigned int flags, void *ctx)
{
    (void)id, (void)from, (void)to, (void)flags;
    ++*(unsigned long long *)ctx;
    return 0;
}

static int measure(struct fgx_pattern *pats, size_t n, int stream, const unsigned char *data,
                   size_t total, size_t chunk, struct result *r)
{
    struct fgx_blob blob = {0};
    hs_database_t *db = NULL;
    hs_scratch_t *scratch = NULL;
    hs_stream_t *st = NULL;
    char err[512];
    double t0;
    size_t done = 0;
    int rv;

    memset(r, 0, sizeof(*r));
    t0 = now_s();
    rv = fgx_ruleset_compile(pats, n, FGX_DIR_C2S, stream ? IPPROTO_TCP : IPPROTO_UDP, &blob, err,
                             sizeof(err));
    r->compile_ms = (now_s() - t0) * 1e3;
    if (rv < 0) {
        fprintf(stderr, "scan: compile of %zu patterns failed: %s\n", n, err);
        goto out;
    }
    r->db_bytes = blob.len;
    if (blob.len == 0) {
        rv = -ENOENT;
        goto out;
    }
    rv = -EINVAL;
    if (hs_deserialize_database(blob.data, blob.len, &db) != HS_SUCCESS ||
        hs_alloc_scratch(db, &scratch) != HS_SUCCESS) {
        fprintf(stderr, "scan: cannot load the compiled database\n");
        goto out;
    }
    t0 = now_s();
    while (done < total) {
        if (stream && hs_open_stream(db, 0, &st) != HS_SUCCESS)
            goto out;
        for (size_t off = 0; off + chunk <= DATA_LEN && done < total; off += chunk) {
            hs_error_t e = stream ? hs_scan_stream(st, (const char *)data + off,
                                                   (unsigned)chunk, 0, scratch, on_match,
                                                   &r->matches)
                                  : hs_scan(db, (const char *)data + off, (unsigned)chunk, 0,
                                            scratch, on_match, &r->matches);

            if (e != HS_SUCCESS)
                goto out;
            done += chunk;
        }
        if (stream && hs_close_stream(st, scratch, on_match, &r->matches) != HS_SUCCESS)
            goto out;
        st = NULL;
    }
    r->gbps = (double)done / (now_s() - t0) / 1e9;
    rv = 0;
out:
    if (st)
        hs_close_stream(st, scratch, NULL, NULL);
    hs_free_scratch(scratch);
    hs_free_database(db);
    fgx_blob_release(&blob);
    return rv;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void usage(void)
{
    fprintf(stderr, "usage: scan [-r COUNTS] [--passes N] [--mib M] [--chunk B] "
                    "[--mode stream|block|both] [-o CSV] [--seed S]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    size_t counts[MAX_COUNTS], ncounts = 0, maxn = 0, chunk = 1448, mib = 256;
    int passes = 3, modes = 3;
    const char *csv_path = NULL, *list = "1,10,100,1000,10000";
    unsigned char *data;
    struct fgx_pattern *pats;
    char **texts;
    FILE *csv = NULL;
    static struct result res[2][MAX_COUNTS][MAX_PASSES];

    g_rng = 6;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (!v)
            usage();
        i++;
        if (!strcmp(k, "-r"))
            list = v;
        else if (!strcmp(k, "--passes"))
            passes = atoi(v);
        else if (!strcmp(k, "--mib"))
            mib = (size_t)atol(v);
        else if (!strcmp(k, "--chunk"))
            chunk = (size_t)atol(v);
        else if (!strcmp(k, "--mode"))
            modes = !strcmp(v, "stream") ? 1 : !strcmp(v, "block") ? 2 : 3;
        else if (!strcmp(k, "-o"))
            csv_path = v;
        else if (!strcmp(k, "--seed"))
            g_rng = strtoull(v, NULL, 10) | 1;
        else
            usage();
    }
    for (const char *s = list; *s && ncounts < MAX_COUNTS;) {
        char *end;

        counts[ncounts] = strtoul(s, &end, 10);
        if (end == s)
            usage();
        if (counts[ncounts] > maxn)
            maxn = counts[ncounts];
        ncounts++;
        s = *end == ',' ? end + 1 : end;
    }
    if (passes < 1 || passes > MAX_PASSES || chunk < 1 || chunk > DATA_LEN || mib < 1)
        usage();
    fgx_log_init("scan", FGX_LOG_WARN);

    data = malloc(DATA_LEN);
    texts = make_patterns(maxn);
    pats = calloc(maxn ? maxn : 1, sizeof(*pats));
    if (!data || !texts || !pats) {
        fprintf(stderr, "scan: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < DATA_LEN; i += 8) {
        uint64_t x = rng_next();

        memcpy(data + i, &x, 8);
    }
    for (size_t i = 0; i < maxn; i++)
        pats[i] = (struct fgx_pattern){
            .filter_id = (uint32_t)i + 1, .regex = texts[i], .dir = FGX_DIR_BOTH};
    if (csv_path) {
        csv = fopen(csv_path, "w");
        if (!csv) {
            fprintf(stderr, "scan: %s: %s\n", csv_path, strerror(errno));
            return 1;
        }
        fprintf(csv, "pass,mode,patterns,compile_ms,gbps,db_bytes,chunk,matches\n");
    }
    printf("# scan: %zu MiB per measurement, %zu-byte writes, %d pass(es), one core\n", mib,
           chunk, passes);
    for (int p = 0; p < passes; p++) {
        for (int m = 0; m < 2; m++) {
            if (!(modes & (1 << m)))
                continue;
            for (size_t c = 0; c < ncounts; c++) {
                struct result *r = &res[m][c][p];
                int rv = measure(pats, counts[c], m == 0, data, mib << 20, chunk, r);

                if (rv < 0)
                    r->gbps = -1;
                fprintf(stderr, "[scan] pass %d %s %zu patterns: compile %.1f ms, %.3f GB/s\n",
                        p + 1, m == 0 ? "stream" : "block", counts[c], r->compile_ms, r->gbps);
                if (csv)
                    fprintf(csv, "%d,%s,%zu,%.3f,%.4f,%zu,%zu,%llu\n", p + 1,
                            m == 0 ? "stream" : "block", counts[c], r->compile_ms, r->gbps,
                            r->db_bytes, chunk, r->matches);
            }
        }
    }
    printf("\n%-7s %9s %12s %14s %9s %16s %10s %8s\n", "mode", "patterns", "compile ms",
           "compile range", "GB/s", "GB/s range", "vs first", "db KiB");
    printf("-----------------------------------------------------------------------------------"
           "----\n");
    for (int m = 0; m < 2; m++) {
        double first = 0;

        if (!(modes & (1 << m)))
            continue;
        for (size_t c = 0; c < ncounts; c++) {
            double cm[MAX_PASSES], gb[MAX_PASSES], lo_c, hi_c, lo_g, hi_g, mc, mg;
            unsigned long long matches = 0;

            for (int p = 0; p < passes; p++) {
                cm[p] = res[m][c][p].compile_ms;
                gb[p] = res[m][c][p].gbps;
                matches += res[m][c][p].matches;
            }
            mc = median(cm, passes);
            mg = median(gb, passes);
            lo_c = cm[0], hi_c = cm[passes - 1], lo_g = gb[0], hi_g = gb[passes - 1];
            if (first <= 0 && mg > 0)
                first = mg;
            if (mg < 0) {
                printf("%-7s %9zu %12.1f %14s %9s %16s %10s %8s\n", m == 0 ? "stream" : "block",
                       counts[c], mc, "", "n/a", "", "", "0");
                continue;
            }
            printf("%-7s %9zu %12.1f %6.1f-%-7.1f %9.3f %7.3f-%-8.3f %10.3f %8.1f%s\n",
                   m == 0 ? "stream" : "block", counts[c], mc, lo_c, hi_c, mg, lo_g, hi_g,
                   first > 0 ? mg / first : 0.0, (double)res[m][c][0].db_bytes / 1024.0,
                   matches ? "  (MATCHES: patterns hit the data)" : "");
        }
    }
    printf("GB/s: 10^9 bytes scanned per second by one thread; 'vs first': ratio to the first "
           "measurable pattern count's median.\n");
    if (csv) {
        fclose(csv);
        fprintf(stderr, "[scan] wrote %s\n", csv_path);
    }
    for (size_t i = 0; i < maxn; i++)
        free(texts[i]);
    free(texts);
    free(pats);
    free(data);
    return 0;
}
