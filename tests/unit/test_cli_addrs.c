/* Unit tests for fgexctl's service addresses: `service add --addr` (repeated) and `--to`,
 * `service addr add|rm`, checked through a pack/unpack round trip of the request; and the
 * backup file's "addrs" and "to" (cli_config.c) written and read back. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.pb-c.h"
#include "fgexctl/cli_args.h"
#include "fgexctl/cli_config.h"
#include "fgexctl/cmd.h"

#define ARGV(...) ((char *[]){"fgexctl", __VA_ARGS__, NULL})

static int argc_of(char **v)
{
    int n = 0;

    while (v[n])
        n++;
    return n;
}

static Fgx__Ctl__Request *parse_wire(char **argv)
{
    static struct cli_cmd cmd;
    uint8_t *buf;
    size_t len;
    Fgx__Ctl__Request *r;

    cr_assert_eq(cli_args_parse(argc_of(argv), argv, NULL, &cmd), 0, "parse failed: %s", cmd.err);
    len = fgx__ctl__request__get_packed_size(&cmd.req);
    buf = malloc(len + 1);
    cr_assert_not_null(buf);
    fgx__ctl__request__pack(&cmd.req, buf);
    r = fgx__ctl__request__unpack(NULL, len, buf);
    free(buf);
    cr_assert_not_null(r);
    return r;
}

static void parse_fails(char **argv, int exit_code, const char *msg_part)
{
    struct cli_cmd cmd;

    cr_assert_eq(cli_args_parse(argc_of(argv), argv, NULL, &cmd), -EINVAL, "accepted: %s %s",
                 argv[1], argv[2]);
    cr_assert_eq(cmd.exit_code, exit_code, "exit %d (%s)", cmd.exit_code, cmd.err);
    cr_assert(strstr(cmd.err, msg_part), "message '%s' lacks '%s'", cmd.err, msg_part);
}

Test(cli_addrs, add_with_several_addresses)
{
    Fgx__Ctl__Request *r =
        parse_wire(ARGV("service", "add", "web", "--proto", "tcp", "--addr", "10.0.0.1:80",
                        "--addr", "[fd00::1]:81", "--addr", "eth1", "--port", "8080"));

    cr_assert_eq(r->req_case, FGX__CTL__REQUEST__REQ_SERVICE_ADD);
    cr_assert_eq(r->service_add->n_addrs, 3);
    cr_assert_str_eq(r->service_add->addrs[0], "10.0.0.1:80");
    cr_assert_str_eq(r->service_add->addrs[1], "[fd00::1]:81");
    cr_assert_str_eq(r->service_add->addrs[2], "eth1"); /* its port: --port, at controld */
    cr_assert_eq(r->service_add->port, 8080);
    cr_assert_null(r->service_add->to);
    fgx__ctl__request__free_unpacked(r, NULL);

    /* --port is not needed when every address has one */
    r = parse_wire(ARGV("service", "add", "w2", "--proto", "udp", "--addr", "*:53"));
    cr_assert_eq(r->service_add->n_addrs, 1);
    cr_assert_eq(r->service_add->port, 0);
    fgx__ctl__request__free_unpacked(r, NULL);
}

Test(cli_addrs, external_layer_with_to)
{
    Fgx__Ctl__Request *r =
        parse_wire(ARGV("service", "add", "x", "--proto", "tcp", "--addr", "10.0.0.1:80", "--layer",
                        "external", "--to", "127.0.0.1:9000"));

    cr_assert(r->service_add->has_layer);
    cr_assert_eq(r->service_add->layer, FGX__CTL__LAYER__LAYER_EXTERNAL);
    cr_assert_str_eq(r->service_add->to, "127.0.0.1:9000");
    fgx__ctl__request__free_unpacked(r, NULL);
    r = parse_wire(ARGV("service", "set", "x", "--to", "127.0.0.1:9001"));
    cr_assert_eq(r->req_case, FGX__CTL__REQUEST__REQ_SERVICE_SET);
    cr_assert_str_eq(r->service_set->to, "127.0.0.1:9001");
    fgx__ctl__request__free_unpacked(r, NULL);
}

Test(cli_addrs, addr_add_and_rm)
{
    Fgx__Ctl__Request *r = parse_wire(ARGV("service", "addr", "add", "web", "eth1:80"));

    cr_assert_eq(r->req_case, FGX__CTL__REQUEST__REQ_SERVICE_ADDR_ADD);
    cr_assert_str_eq(r->service_addr_add->ref, "web");
    cr_assert_str_eq(r->service_addr_add->addr, "eth1:80");
    fgx__ctl__request__free_unpacked(r, NULL);
    r = parse_wire(ARGV("--json", "service", "addr", "rm", "3", "10.0.0.0/24"));
    cr_assert_eq(r->req_case, FGX__CTL__REQUEST__REQ_SERVICE_ADDR_RM);
    cr_assert_str_eq(r->service_addr_rm->ref, "3");
    cr_assert_str_eq(r->service_addr_rm->addr, "10.0.0.0/24");
    fgx__ctl__request__free_unpacked(r, NULL);
}

Test(cli_addrs, bad_command_lines)
{
    parse_fails(ARGV("service", "add", "w", "--proto", "tcp"), CLI_EXIT_USAGE, "--addr");
    parse_fails(
        ARGV("service", "add", "w", "--proto", "tcp", "--ip", "10.0.0.1", "--addr", "10.0.0.2:80"),
        CLI_EXIT_USAGE, "--ip");
    parse_fails(ARGV("service", "add", "w", "--proto", "tcp", "--addr", "10.0.0.300:80"),
                CLI_EXIT_INVALID, "invalid --addr '10.0.0.300:80'");
    parse_fails(ARGV("service", "add", "w", "--proto", "tcp", "--addr", "10.0.0.1"),
                CLI_EXIT_INVALID, "no port");
    parse_fails(ARGV("service", "add", "w", "--proto", "tcp", "--port", "1", "--layer", "ebpf"),
                CLI_EXIT_INVALID, "nfqueue, proxy or external");
    parse_fails(ARGV("service", "addr", "add", "web", "a/b:80"), CLI_EXIT_INVALID,
                "invalid address");
    parse_fails(ARGV("service", "addr", "add", "web"), CLI_EXIT_USAGE, "missing ADDR[:PORT]");
    parse_fails(ARGV("service", "addr", "web", "10.0.0.1"), CLI_EXIT_USAGE, "service addr:");
}

Test(cli_addrs, backup_keeps_addresses_and_the_hand_off)
{
    Fgx__Ctl__ServiceAddr a0 = FGX__CTL__SERVICE_ADDR__INIT, a1 = FGX__CTL__SERVICE_ADDR__INIT;
    Fgx__Ctl__ServiceAddr *addrs[2] = {&a0, &a1};
    Fgx__Ctl__Service s = FGX__CTL__SERVICE__INIT, *sp = &s;
    Fgx__Ctl__Config cfg = FGX__CTL__CONFIG__INIT, *back = NULL;
    char *text = NULL, err[256];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    a0.addr = "10.0.0.0/24";
    a0.port = 80;
    a1.addr = "eth1";
    a1.port = 81;
    s.id = 1;
    s.name = "web";
    s.proto = FGX__CTL__PROTO__PROTO_TCP;
    s.ip = "10.0.0.0/24";
    s.port = 80;
    s.layer = FGX__CTL__LAYER__LAYER_EXTERNAL;
    s.to = "127.0.0.1:9000";
    s.n_addrs = 2;
    s.addrs = addrs;
    cfg.n_services = 1;
    cfg.services = &sp;
    cr_assert_not_null(f);
    cr_assert_eq(cli_config_write(f, &cfg, err, sizeof(err)), 0, "%s", err);
    fclose(f);
    cr_assert(strstr(text, "\"addrs\": [\n        \"10.0.0.0/24:80\",\n        \"eth1:81\"\n"),
              "%s", text);
    cr_assert(strstr(text, "\"to\": \"127.0.0.1:9000\""), "%s", text);
    cr_assert(strstr(text, "\"layer\": \"external\""), "%s", text);
    cr_assert_eq(cli_config_read(text, len, &back, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(back->n_services, 1);
    cr_assert_eq(back->services[0]->n_addrs, 2);
    cr_assert_str_eq(back->services[0]->addrs[0]->addr, "10.0.0.0/24");
    cr_assert_eq(back->services[0]->addrs[0]->port, 80);
    cr_assert_str_eq(back->services[0]->addrs[1]->addr, "eth1");
    cr_assert_eq(back->services[0]->addrs[1]->port, 81);
    cr_assert_str_eq(back->services[0]->to, "127.0.0.1:9000");
    cr_assert_eq(back->services[0]->layer, FGX__CTL__LAYER__LAYER_EXTERNAL);
    fgx__ctl__config__free_unpacked(back, NULL);
    free(text);
}
