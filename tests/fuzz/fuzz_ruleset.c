/* libFuzzer harness: the ruleset file (fgexctl/cli_ruleset.c) that `filter import` and
 * `--sync` read, a file players pass around. What parses is written back out and must parse to
 * the same filters (regex bytes, direction, case, action, label), so an export never changes
 * what a re-import blocks. A regex with a line break has no line of its own: the writer
 * refuses it, which the parser can never produce. */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgexctl/cli_ruleset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *label_of(const char *l)
{
    return l != NULL ? l : "";
}

static void same(const Fgx__Ctl__FilterSpec *a, const Fgx__Ctl__Filter *b)
{
    assert(strcmp(a->regex, b->regex) == 0);
    assert(a->dir == b->dir);
    assert(a->nocase == b->nocase);
    assert((!a->has_active || a->active) == b->active);
    assert((a->has_action ? a->action : FGX__CTL__FILTER_ACTION__FILTER_ACTION_BLOCK) ==
           (b->has_action ? b->action : FGX__CTL__FILTER_ACTION__FILTER_ACTION_BLOCK));
    assert(strcmp(label_of(a->label), label_of(b->label)) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Fgx__Ctl__FilterImport fi = FGX__CTL__FILTER_IMPORT__INIT, back = FGX__CTL__FILTER_IMPORT__INIT;
    Fgx__Ctl__Filter *fs = NULL, **fp = NULL;
    char err[512], *text = NULL;
    size_t tlen = 0, i;
    FILE *f;

    if (cli_ruleset_parse((const char *)data, size, &fi, err, sizeof(err)) != 0)
        return 0;
    fs = calloc(fi.n_filters + 1, sizeof(*fs));
    fp = calloc(fi.n_filters + 1, sizeof(*fp));
    assert(fs && fp);
    for (i = 0; i < fi.n_filters; i++) {
        const Fgx__Ctl__FilterSpec *s = fi.filters[i];

        fgx__ctl__filter__init(&fs[i]);
        fs[i].id = (uint32_t)i + 1;
        fs[i].regex = s->regex;
        fs[i].dir = s->dir;
        fs[i].nocase = s->nocase;
        fs[i].active = !s->has_active || s->active;
        fs[i].has_action = s->has_action;
        fs[i].action = s->action;
        fs[i].label = s->label;
        fp[i] = &fs[i];
    }
    f = open_memstream(&text, &tlen);
    assert(f);
    if (cli_ruleset_write(f, "svc", fp, fi.n_filters, err, sizeof(err)) == 0) {
        assert(fclose(f) == 0);
        assert(cli_ruleset_parse(text, tlen, &back, err, sizeof(err)) == 0);
        assert(back.n_filters == fi.n_filters);
        for (i = 0; i < fi.n_filters; i++)
            same(back.filters[i], &fs[i]);
        cli_ruleset_release(&back);
    } else {
        (void)fclose(f);
    }
    free(text);
    free(fs);
    free(fp);
    cli_ruleset_release(&fi);
    return 0;
}
