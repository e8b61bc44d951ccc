/* Unit tests for fgexctl's capture commands (cmd_capture.c): `capture`, `events show SEQ`,
 * `filter test` and the service --capture options parsed into their requests, and the text
 * of an event's capture (hex dump, the blocked bytes after their marker) rendered from a
 * capture encoded by the workers' own encoder (libcommon/capture.c). */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.pb-c.h"
#include "datapath.pb-c.h"
#include "fgexctl/cli_args.h"
#include "fgexctl/cli_fmt.h"
#include "fgexctl/cmd.h"
#include "fgx/capture.h"

#define ARGV(...) ((char *[]){"fgexctl", __VA_ARGS__, NULL})

static int argc_of(char **v)
{
    int n = 0;

    while (v[n])
        n++;
    return n;
}

static void parse_ok(char **argv, struct cli_cmd *cmd)
{
    cr_assert_eq(cli_args_parse(argc_of(argv), argv, NULL, cmd), 0, "parse failed: %s", cmd->err);
}

static void parse_fails(char **argv, int code, const char *part)
{
    struct cli_cmd cmd;

    cr_assert_eq(cli_args_parse(argc_of(argv), argv, NULL, &cmd), -EINVAL);
    cr_assert_eq(cmd.exit_code, code, "exit %d (%s)", cmd.exit_code, cmd.err);
    cr_assert(strstr(cmd.err, part), "'%s' lacks '%s'", cmd.err, part);
}

Test(cli_capture, capture_request)
{
    struct cli_cmd cmd;

    parse_ok(ARGV("capture", "web", "--pcap", "/tmp/x.pcap", "--blocked", "--since", "10m", "--src",
                  "10.0.0.0/8", "--filter", "7"),
             &cmd);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_CAPTURE);
    cr_assert_str_eq(cmd.req.capture->service, "web");
    cr_assert(cmd.req.capture->has_blocked && cmd.req.capture->blocked);
    cr_assert(cmd.req.capture->has_since_ns && cmd.req.capture->since_ns > 0);
    cr_assert_str_eq(cmd.req.capture->src, "10.0.0.0/8");
    cr_assert(cmd.req.capture->has_filter_id && cmd.req.capture->filter_id == 7);
    parse_fails(ARGV("capture", "web"), CLI_EXIT_USAGE, "missing --pcap");
    parse_fails(ARGV("--json", "capture", "web", "--pcap", "-"), CLI_EXIT_USAGE, "stdout");
    parse_fails(ARGV("capture", "web", "--pcap", "f", "--since", "10x"), CLI_EXIT_INVALID,
                "--since");
    parse_fails(ARGV("capture", "web", "--pcap", "f", "--filter", "-1"), CLI_EXIT_INVALID,
                "--filter");
}

Test(cli_capture, events_show_and_events)
{
    struct cli_cmd cmd;

    parse_ok(ARGV("events", "show", "42", "--raw", "--dir", "s2c"), &cmd);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_EVENT_SHOW);
    cr_assert_eq(cmd.req.event_show->seq, 42);
    /* events alone and events SERVICE are what they were; a service named show too */
    parse_ok(ARGV("events", "show"), &cmd);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_EVENTS);
    cr_assert_str_eq(cmd.req.events->service, "show");
    parse_ok(ARGV("events", "web", "--limit", "5"), &cmd);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_EVENTS);
    parse_fails(ARGV("events", "show", "x1"), CLI_EXIT_INVALID, "invalid SEQ");
    parse_fails(ARGV("events", "web", "--raw"), CLI_EXIT_USAGE, "events show");
    parse_fails(ARGV("events", "web", "3"), CLI_EXIT_USAGE, "one SERVICE");
}

Test(cli_capture, filter_test_and_service_options)
{
    struct cli_cmd cmd;

    parse_ok(ARGV("filter", "test", "web", "evil[0-9]+", "--dir", "c2s", "--nocase"), &cmd);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_FILTER_TEST);
    cr_assert_str_eq(cmd.req.filter_test->regex, "evil[0-9]+");
    cr_assert(cmd.req.filter_test->has_dir && cmd.req.filter_test->dir == FGX__CTL__DIR__DIR_C2S);
    cr_assert(cmd.req.filter_test->nocase);
    parse_fails(ARGV("filter", "test", "web", ""), CLI_EXIT_INVALID, "empty");
    parse_ok(ARGV("service", "add", "w", "--proto", "tcp", "--port", "80", "--capture", "off",
                  "--capture-conns", "10", "--capture-bytes", "4096"),
             &cmd);
    cr_assert(cmd.req.service_add->has_capture && !cmd.req.service_add->capture);
    cr_assert_eq(cmd.req.service_add->capture_conns, 10);
    cr_assert_eq(cmd.req.service_add->capture_bytes, 4096);
    parse_ok(ARGV("service", "set", "w", "--capture", "on"), &cmd);
    cr_assert(cmd.req.service_set->has_capture && cmd.req.service_set->capture);
    parse_fails(ARGV("service", "set", "w", "--capture-bytes", "0"), CLI_EXIT_INVALID,
                "--capture-bytes");
    parse_fails(ARGV("service", "set", "w", "--capture-conns", "99999999"), CLI_EXIT_INVALID,
                "--capture-conns");
}

Test(cli_capture, events_show_text_marks_blocked_bytes)
{
    static const uint8_t cli4[4] = {10, 0, 0, 2}, srv4[4] = {10, 0, 0, 1};
    Fgx__Ctl__Event ev = FGX__CTL__EVENT__INIT, *evp = &ev;
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__EventShow es = FGX__CTL__EVENT_SHOW__INIT;
    Fgx__Ctl__Request req = FGX__CTL__REQUEST__INIT;
    ProtobufCBinaryData capb;
    struct fgx_cap_ring *r;
    struct fgx_cap_ref ref;
    struct cli_cmd cmd;
    char *out = NULL;
    size_t outlen = 0;
    FILE *f;

    cr_assert_eq(fgx_cap_ring_new(1, 1, 256, &r), 0);
    fgx_cap_open(r, 6, 4, cli4, 40000, srv4, 80, 1, &ref);
    fgx_cap_add(r, &ref, 0, 100, 100, (const uint8_t *)"LOGIN x\r\n", 9, 2, false);
    fgx_cap_add(r, &ref, 0, 100, 109, (const uint8_t *)"evil1337", 8, 3, true);
    cr_assert(fgx_cap_pin(r, &ref, 5));
    cr_assert_eq(fgx_cap_take(r, &ref, &capb.data, &capb.len), 0);
    fgx_cap_ring_free(r);

    parse_ok(ARGV("events", "show", "9"), &cmd); /* sets show's options: not raw */
    ev.seq = 9;
    ev.service = "web";
    ev.src = "10.0.0.2";
    ev.sport = 40000;
    ev.dst = "10.0.0.1";
    ev.dport = 80;
    rep.n_events = 1;
    rep.events = &evp;
    rep.n_captures = 1;
    rep.captures = &capb;
    req.req_case = FGX__CTL__REQUEST__REQ_EVENT_SHOW;
    req.event_show = &es;
    f = open_memstream(&out, &outlen);
    cr_assert_not_null(f);
    cr_assert_eq(cli_fmt_reply(f, &req, &rep, false), 0);
    fclose(f);
    cr_assert(strstr(out, "client -> server (17 byte(s) kept):"), "%s", out);
    cr_assert(strstr(out, "|LOGIN x..|"), "%s", out);
    {
        const char *mark = strstr(out, "-- blocked from here");
        const char *evil = strstr(out, "|evil1337|");

        cr_assert(mark && evil && mark < evil, "the blocked bytes follow the marker:\n%s", out);
    }
    free(out);
    free(capb.data);
}

/* Found by tests/fuzz/fuzz_capture (its seed udp-empty-direction-segment): a capture whose
 * direction holds no bytes but lists a segment of it (a corrupt or hostile capture) gives a
 * pcap with that datagram empty, and no pointer arithmetic on the direction's missing data. */
Test(cli_capture, pcap_of_a_segment_in_an_empty_direction)
{
    static uint8_t cli4[4] = {10, 0, 0, 2}, srv4[4] = {10, 0, 0, 1};
    Fgx__Dp__Capture c = FGX__DP__CAPTURE__INIT;
    Fgx__Dp__CaptureSeg seg = FGX__DP__CAPTURE_SEG__INIT, *segp = &seg;
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    ProtobufCBinaryData capb;
    uint8_t *pcap = NULL;
    size_t len = 0;
    char err[256] = "";

    c.service_id = 1;
    c.ipproto = 17;
    c.caddr = (ProtobufCBinaryData){4, cli4};
    c.saddr = (ProtobufCBinaryData){4, srv4};
    c.cport = 40000;
    c.sport = 53;
    c.start_ns = 1000;
    seg.dir = 2; /* server->client, which has no bytes */
    seg.seq = 0;
    seg.len = 6;
    seg.time_ns = 1001;
    c.n_segs = 1;
    c.segs = &segp;
    capb.len = fgx__dp__capture__get_packed_size(&c);
    capb.data = malloc(capb.len);
    cr_assert_not_null(capb.data);
    fgx__dp__capture__pack(&c, capb.data);
    rep.n_captures = 1;
    rep.captures = &capb;

    cr_assert_eq(cli_cmd_capture_pcap(&rep, &pcap, &len, err, sizeof(err)), 0, "%s", err);
    /* the global header, then one record: 16 bytes of record header, the frame with an empty
     * UDP payload (Ethernet 14 + IPv4 20 + UDP 8) */
    cr_assert_eq(len, 24 + 16 + 14 + 20 + 8);
    free(pcap);
    free(capb.data);
}
