#!/usr/bin/python3
"""Integration: gRPC through the HTTP service kind (--proto http, proxy layer). A real gRPC
service (python3-grpcio, h2c) in the server namespace, a real gRPC client in the client
namespace, in the clear (h2c, prior knowledge) and over TLS (ALPN h2, --upstream plain): unary,
server-streaming and bidirectional calls. The method is the rendered request line; each
length-prefixed message is scanned on its own, without its 5-byte prefix (a pattern anchored
with ^ matches its first byte) and inflated where the client compressed it with gzip; a
streaming call is judged message by message, and a match resets that stream only. A filter
file's GrpcRequest / GrpcResponse (Firegex 5.0.0's GrpcMessage) is called message by message
too."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import SRV4, check, test  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
GRPCPY = os.path.join(HERE, "grpcutil.py")
TLSPY = os.path.join(HERE, "fgxtls.py")

METHOD_REGEX = r"POST /fgx\.Test/Secret HTTP/1\.1"
# ^: the message's first byte, which with its prefix would be the flag byte 0 or 1
MSG_REGEX = r"^evil[0-9]+"
RESP_REGEX = r"FLAG\{"


def proxy_cert(env):
    d = os.path.join(env.tmp, "certs")
    if not os.path.isdir(d):
        os.makedirs(d)
        it.sh(it.PY, TLSPY, "certs", d)
    return os.path.join(d, "proxy.pem"), os.path.join(d, "proxy.key")


def grpc_server(env, port):
    """The gRPC service on port in the server namespace; returns (process, its log)."""
    log = os.path.join(env.tmp, "grpc-%d.log" % port)
    open(log, "w").close()
    p = subprocess.Popen(["ip", "netns", "exec", env.srv, it.PY, GRPCPY, "serve", str(port), log],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    check("listening" in line, "the gRPC service did not start: %r %r", line,
          p.stderr.read(2000) if p.poll() is not None else "")
    return p, log


def received(log):
    time.sleep(0.2)
    with open(log, encoding="latin-1") as f:
        return [ln.rstrip("\n") for ln in f]


def call(env, port, method, kind, msgs, gzip=False, tls=False):
    argv = ["ip", "netns", "exec", env.cli, it.PY, GRPCPY, "call", "%s:%d" % (SRV4, port),
            "/fgx.Test/" + method, kind]
    if gzip:
        argv.append("--gzip")
    if tls:
        argv += ["--tls", proxy_cert(env)[0], "svc.test"]
    r = subprocess.run(argv + list(msgs), capture_output=True, text=True, timeout=30)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as e:
        raise AssertionError("the gRPC client printed %r (%s): %s" % (r.stdout, e,
                                                                    r.stderr[-1500:])) from e


def grpc_service(env, name, port, tls):
    extra = ("--layer", "proxy")
    if tls:
        c = proxy_cert(env)
        extra += ("--tls-cert", c[0], "--tls-key", c[1], "--upstream", "plain")
    env.service(name, "http", port, extra)
    env.filter(name, METHOD_REGEX, dir="c2s")
    env.filter(name, MSG_REGEX, dir="c2s")
    env.filter(name, RESP_REGEX, dir="s2c")


@test
def grpc_methods_and_messages_are_judged_on_h2c_and_tls(env):
    for tls in (False, True):
        port = env.port()
        name = "g-tls" if tls else "g-h2c"
        grpc_service(env, name, port, tls)
        p, log = grpc_server(env, port)
        try:
            def ok(method, kind, msgs, want, gzip=False):
                r = call(env, port, method, kind, msgs, gzip=gzip, tls=tls)
                check(r["ok"] and r["answers"] == want, "%s %s %s %r (gzip %s): %r", name, kind,
                      method, msgs, gzip, r)

            def blocked(method, kind, msgs, gzip=False):
                r = call(env, port, method, kind, msgs, gzip=gzip, tls=tls)
                check(not r["ok"], "%s %s %s %r (gzip %s) passed: %r", name, kind, method, msgs,
                      gzip, r)
                # RST_STREAM CANCEL, as the client library reports it
                check(r["code"] == "StatusCode.CANCELLED", "%s %s %s: %r", name, kind, method, r)
                return r

            ok("Echo", "unary", ["hello"], ["you sent hello"])
            ok("Echo", "unary", ["hello"], ["you sent hello"], gzip=True)
            # in the message, not at its start: ^ is the message's first byte
            ok("Echo", "unary", ["not evil1337"], ["you sent not evil1337"])
            ok("Chunks", "stream", ["x"], ["chunk 0 for x", "chunk 1 for x", "chunk 2 for x"])
            # a trailers-only status survives the proxy as the service sent it
            r = call(env, port, "Denied", "unary", ["x"], tls=tls)
            check(not r["ok"] and r["code"] == "StatusCode.PERMISSION_DENIED" and
                  r["details"] == "denied x", "%s: trailers-only status: %r", name, r)
            ok("Chat", "bidi", ["one", "two", "three"], ["re: one", "re: two", "re: three"])
            blocked("Secret", "unary", ["hello"])
            blocked("Echo", "unary", ["evil1337"])
            # compressed on the wire: the pattern is in the inflated message only
            blocked("Echo", "unary", ["evil1337" * 8], gzip=True)
            blocked("Chunks", "stream", ["evil42"])
            blocked("Leak", "unary", ["hello"])
            # the third message of a bidirectional call: the first two answered, then the reset
            r = blocked("Chat", "bidi", ["one", "two", "evil7", "four"])
            check(r["answers"] == ["re: one", "re: two"], "%s: the bidi call's answers %r", name,
                  r)
            # a reset stream, then another call on the same connection completes
            r = call(env, port, "Echo", "unary2", ["evil1", "hello"], tls=tls)
            check(r["answers"][0].startswith("ERR") and r["answers"][1] == "you sent hello",
                  "%s: the call after the reset one on its connection: %r", name, r)
            got = received(log)
            check("Secret hello" not in got, "%s: the blocked method reached the service: %r",
                  name, got)
            check(not [ln for ln in got if "evil" in ln and "not evil" not in ln],
                  "%s: a blocked message reached the service: %r", name, got)
            check(got.count("Chat one") == 2 and got.count("Chat two") == 2 and
                  "Chat four" not in got, "%s: the bidi calls' messages: %r", name, got)
            check("Echo hello" in got and "Leak hello" in got, "%s: service log %r", name, got)
        finally:
            p.kill()
            p.wait(5)
    # each block is an event naming its stream
    evs = [e for e in env.ctl("events") if e.get("service") in ("g-h2c", "g-tls")]
    check(len(evs) >= 14, "%d events: %r", len(evs), evs)
    check(all(e.get("h2_stream") for e in evs), "events without their stream: %r", evs)


@test
def a_grpc_filter_file_judges_message_by_message(env):
    """A filter file with GrpcRequest / GrpcResponse (Firegex 5.0.0's model) and an
    HttpRequest: called for each message as it completes, without its prefix; a refusal
    resets that stream only."""
    script = os.path.join(HERE, "scripts", "grpc_filter.py")
    for tls in (False, True):
        port = env.port()
        name = "gf-tls" if tls else "gf-h2c"
        extra = ("--layer", "proxy")
        if tls:
            c = proxy_cert(env)
            extra += ("--tls-cert", c[0], "--tls-key", c[1], "--upstream", "plain")
        env.service(name, "http", port, extra)
        r = env.ctl_raw("script", "set", name, script, json_out=False)
        check(r.returncode == 0, "script set %s: %r", name, r.stderr)
        p, log = grpc_server(env, port)
        try:
            def run(method, kind, msgs, gzip=False):
                return call(env, port, method, kind, msgs, gzip=gzip, tls=tls)

            for method, kind, msgs, want, gz in (
                    ("Echo", "unary", ["harmless"], ["you sent harmless"], False),
                    ("Echo", "unary", ["harmless"], ["you sent harmless"], True),
                    ("Echo", "unary", ["a NOT-THIS-ONE"], ["you sent a NOT-THIS-ONE"], False),
                    ("Chunks", "stream", ["x"], ["chunk 0 for x", "chunk 1 for x",
                                                 "chunk 2 for x"], False),
                    ("Chat", "bidi", ["one", "two"], ["re: one", "re: two"], False)):
                r = run(method, kind, msgs, gz)
                check(r["ok"] and r["answers"] == want, "%s: innocent %s %r (gzip %s): %r",
                      name, method, msgs, gz, r)
            for method, kind, msgs, gz in (("Echo", "unary", ["NOT-THIS-ONE"], False),
                                           ("Echo", "unary", ["NOT-THIS-ONE"], True),
                                           ("Secret", "unary", ["hello"], False),
                                           ("Leak", "unary", ["hello"], False)):
                r = run(method, kind, msgs, gz)
                check(not r["ok"] and r["code"] == "StatusCode.CANCELLED",
                      "%s: %s %r (gzip %s) passed the file: %r", name, method, msgs, gz, r)
            # a trailers-only answer reaches HttpFullResponse (its status in its head)
            r = run("Denied", "unary", ["x"])
            check(not r["ok"] and r["code"] == "StatusCode.PERMISSION_DENIED", "%s: %r", name, r)
            r = run("Denied", "unary", ["secret"])
            check(not r["ok"] and r["code"] == "StatusCode.CANCELLED",
                  "%s: the trailers-only answer passed the file: %r", name, r)
            # the needle in the third message: the first two answered while the stream runs
            r = run("Chat", "bidi", ["one", "two", "NOT-THIS-ONE", "four"])
            check(not r["ok"] and r["answers"] == ["re: one", "re: two"],
                  "%s: the bidi call with the needle third: %r", name, r)
            r = run("Echo", "unary2", ["NOT-THIS-ONE", "harmless"])
            check(r["answers"][0].startswith("ERR") and r["answers"][1] == "you sent harmless",
                  "%s: the call after the refused one on its connection: %r", name, r)
            got = received(log)
            check("Echo NOT-THIS-ONE" not in got and "Chat NOT-THIS-ONE" not in got and
                  "Secret hello" not in got and "Chat four" not in got,
                  "%s: what the file refused reached the service: %r", name, got)
        finally:
            p.kill()
            p.wait(5)
    evs = [e for e in env.ctl("events") if e.get("service") in ("gf-h2c", "gf-tls")]
    check({e.get("script_function") for e in evs} == {"no_secret_method", "no_needle",
                                                       "no_flag", "no_denied_secret"} and
          all(e.get("h2_stream") for e in evs), "events: %r", evs)


@test
def a_message_that_cannot_be_judged_is_reset_not_passed(env):
    """A compressed flag on a message of a stream that named no encoding: fgex cannot read it,
    so the stream is reset (and said so in the log) rather than passed unread."""
    import socket
    port = env.port()
    env.service("g-bad", "http", port, ("--layer", "proxy"))
    env.filter("g-bad", MSG_REGEX, dir="c2s")
    p, log = grpc_server(env, port)
    try:
        # HPACK by hand: :method POST, :scheme http, :path /fgx.Test/Echo, :authority x,
        # content-type application/grpc, te trailers (literals without indexing or Huffman)
        def lit(n, v):
            return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v
        hdrs = (b"\x83\x86" + b"\x04\x0e/fgx.Test/Echo" + b"\x01\x01x" +
                lit(b"content-type", b"application/grpc") + lit(b"te", b"trailers"))

        def frame(t, f, sid, pl):
            return len(pl).to_bytes(3, "big") + bytes([t, f]) + sid.to_bytes(4, "big") + pl
        msg = b"\x01" + (8).to_bytes(4, "big") + b"evil1337"
        req = (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"") + frame(1, 4, 1, hdrs) +
               frame(0, 1, 1, msg))
        c = env.tcp_client(SRV4, port, [req, ("read", 1.5)])
        rx = c.get("received", b"")
        check(frame(3, 0, 1, (8).to_bytes(4, "big")) in rx, "no RST_STREAM for stream 1: %r", rx)
        check(received(log) == [], "the message reached the service: %r", received(log))
        check(it.wait_until(lambda: "cannot be judged" in env.log_tail(200), 3),
              "nothing in the log says why: %s", env.log_tail(10))
    finally:
        p.kill()
        p.wait(5)


if __name__ == "__main__":
    rc = it.run_module("test_grpc")
    sys.exit(rc)
