/* Unit tests for script filters' pure parts: the stored record (controld/ctl_script.c) against
 * a real LMDB environment (save, load, removed with its service, the SCRIPT payload the data
 * path gets: disabled names, then the source byte for byte), and fgexctl's parse of the script
 * commands (fgexctl/cmd_script.c). */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "controld/ctl_script.h"
#include "controld/ctl_store.h"
#include "fgexctl/cli_args.h"

static char dir[64];
static struct ctl_store *st;

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/fgx-test-script-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(ctl_store_open(dir, 0, &st), 0);
}

static void teardown(void)
{
    char path[128];

    ctl_store_close(st);
    st = NULL;
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/lock.mdb", dir);
    unlink(path);
    rmdir(dir);
}

static uint32_t add_service(struct ctl_txn *t, const char *name, uint16_t port)
{
    struct ctl_service s = {.ipproto = IPPROTO_TCP, .port = port, .active = true};

    snprintf(s.name, sizeof(s.name), "%s", name);
    cr_assert_eq(ctl_store_service_put(t, &s), 0);
    return s.id;
}

/* A Script as ctl_script_check() leaves it: two functions, the second disabled. */
static void save(struct ctl_txn *t, uint32_t sid, const char *src, size_t len)
{
    Fgx__Ctl__Script s = FGX__CTL__SCRIPT__INIT;
    Fgx__Ctl__ScriptFunction f1 = FGX__CTL__SCRIPT_FUNCTION__INIT, f2 = f1;
    Fgx__Ctl__ScriptFunction *fs[] = {&f1, &f2};

    static char *p1[] = {"HttpRequest"}, *p2[] = {"TCPOutputStream"};

    f1.name = "first";
    f1.n_params = 1;
    f1.params = p1;
    f2.n_params = 1;
    f2.params = p2;
    f1.has_active = f2.has_active = 1;
    f1.active = 1;
    f2.name = "second_one";
    f2.active = 0;
    s.service_id = sid;
    s.filename = "x.py";
    s.has_source = 1;
    s.source.data = (uint8_t *)src;
    s.source.len = len;
    s.n_functions = 2;
    s.functions = fs;
    s.has_deadline_ms = 1;
    s.deadline_ms = 250;
    cr_assert_eq(ctl_script_save(t, &s), 0);
}

Test(script, record_round_trip_and_payload, .init = setup, .fini = teardown)
{
    static const char src[] = "from fgex import *\n\xff\x00 bytes kept\n";
    struct ctl_txn *t;
    Fgx__Ctl__Script *got;
    struct fgx_blob b;
    uint32_t sid, dl = 0;
    uint8_t dirs = 0;

    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    sid = add_service(t, "web", 80);
    cr_assert_eq(ctl_script_load(t, sid, &got), -ENOENT);
    cr_assert_eq(ctl_script_payload(t, sid, &b, &dl, &dirs), -ENOENT);
    save(t, sid, src, sizeof(src) - 1);
    cr_assert_eq(ctl_script_load(t, sid, &got), 0);
    cr_assert_eq(got->source.len, sizeof(src) - 1);
    cr_assert_eq(memcmp(got->source.data, src, sizeof(src) - 1), 0);
    cr_assert_eq(got->n_functions, 2);
    cr_assert_str_eq(got->functions[1]->name, "second_one");
    ctl_script_free(got);
    cr_assert_eq(ctl_script_payload(t, sid, &b, &dl, &dirs), 0);
    cr_assert_eq(dl, 250);
    /* first (active) receives HttpRequest: both directions go to the script (the server's
     * 101 is what switches the client's bytes from requests to the upgraded stream) */
    cr_assert_eq(dirs, 3);
    /* u16 count 1, u16 length 10, "second_one", then the source */
    cr_assert_eq(b.len, 2 + 2 + 10 + sizeof(src) - 1);
    cr_assert_eq(((uint8_t *)b.data)[0], 1);
    cr_assert_eq(((uint8_t *)b.data)[1], 0);
    cr_assert_eq(((uint8_t *)b.data)[2], 10);
    cr_assert_eq(memcmp((uint8_t *)b.data + 4, "second_one", 10), 0);
    cr_assert_eq(memcmp((uint8_t *)b.data + 14, src, sizeof(src) - 1), 0);
    free(b.data);
    cr_assert_eq(ctl_txn_commit(t), 0);
}

Test(script, removed_with_its_service, .init = setup, .fini = teardown)
{
    struct ctl_txn *t;
    Fgx__Ctl__Script *got;
    uint32_t a, b, *ids;
    size_t n;

    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    a = add_service(t, "a", 81);
    b = add_service(t, "b", 82);
    save(t, a, "x", 1);
    save(t, b, "y", 1);
    cr_assert_eq(ctl_store_script_ids(t, &ids, &n), 0);
    cr_assert_eq(n, 2);
    cr_assert(ids[0] == a && ids[1] == b);
    free(ids);
    cr_assert_eq(ctl_store_service_del(t, a), 0);
    cr_assert_eq(ctl_script_load(t, a, &got), -ENOENT);
    cr_assert_eq(ctl_script_load(t, b, &got), 0);
    ctl_script_free(got);
    cr_assert_eq(ctl_txn_commit(t), 0);
}

static int parse(const char **argv, struct cli_cmd *cmd)
{
    int argc = 0;

    while (argv[argc])
        argc++;
    return cli_args_parse(argc, (char **)argv, NULL, cmd);
}

Test(script, cli_set_and_functions)
{
    struct cli_cmd cmd;
    const char *set[] = {"fgexctl", "script", "set", "web", "dir/f.py", "--deadline", "250", NULL};
    const char *bad[] = {"fgexctl", "script", "set", "web", "f.py", "--deadline", "0", NULL};
    const char *dis[] = {"fgexctl", "script", "disable", "web", "probe", NULL};

    cr_assert_eq(parse(set, &cmd), 0);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_SCRIPT_SET);
    cr_assert_str_eq(cmd.req.script_set->service, "web");
    cr_assert_str_eq(cmd.req.script_set->filename, "f.py");
    cr_assert_str_eq(cmd.file, "dir/f.py");
    cr_assert(cmd.req.script_set->has_deadline_ms && cmd.req.script_set->deadline_ms == 250);
    cr_assert_eq(parse(bad, &cmd), -EINVAL);
    cr_assert_eq(cmd.exit_code, CLI_EXIT_INVALID);
    cr_assert_eq(parse(dis, &cmd), 0);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_SCRIPT_DISABLE);
    cr_assert_str_eq(cmd.req.script_disable->function, "probe");
}

Test(script, cli_test_and_log_run_here)
{
    struct cli_cmd cmd;
    const char *test[] = {"fgexctl", "script", "test", "f.py", "--pcap", "c.pcap", "--port",
                          "80", NULL};
    const char *nopcap[] = {"fgexctl", "script", "test", "f.py", NULL};
    const char *follow[] = {"fgexctl", "script", "log", "web", "--follow", NULL};
    const char *once[] = {"fgexctl", "script", "log", "web", NULL};

    cr_assert_eq(parse(test, &cmd), 0);
    cr_assert_not_null(cmd.run_local);
    cr_assert_str_eq(cmd.pcap, "c.pcap");
    cr_assert_str_eq(cmd.script_port, "80");
    cr_assert_eq(parse(nopcap, &cmd), -EINVAL);
    cr_assert_eq(cmd.exit_code, CLI_EXIT_USAGE);
    cr_assert_eq(parse(follow, &cmd), 0);
    cr_assert_not_null(cmd.run_local);
    cr_assert_eq(parse(once, &cmd), 0);
    cr_assert_null(cmd.run_local);
    cr_assert_str_eq(cmd.req.script_log->service, "web");
}
