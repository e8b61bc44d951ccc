#!/usr/bin/python3
"""Integration: several edges, one filter set (issue 26 point 6). One HTTP/1.1 daemon
(fgxh1.py) listens in the clear on one port; one fgex service (--proto http, proxy layer)
publishes it there (`,tcp`) and over TLS on a second port that only fgex listens on
(`,tls,to=PORT`). Real clients (curl --http1.1 in the clear, --http1.1 and --http2 over TLS)
reach the same daemon by both edges; one regex blocks the evil request on both; the events name
the edge the client came by. An edge is refused where nothing could act on it."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import SRV4, check, test  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def h1_daemon(env, port):
    log = os.path.join(env.tmp, "edges-%d.log" % port)
    open(log, "w").close()
    p = subprocess.Popen(["ip", "netns", "exec", env.srv, it.PY, os.path.join(HERE, "fgxh1.py"),
                          log, str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    check(p.stdout.readline().strip() == "ready", "fgxh1.py did not start")
    return log, p


def seen(log):
    time.sleep(0.3)
    with open(log) as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def curl(env, url, mode):
    p = subprocess.run(["ip", "netns", "exec", env.cli, "curl", "-sk", "--max-time", "5", "-w",
                        "\n%{http_version}", mode, url], capture_output=True, text=True,
                       timeout=20)
    return p.returncode, p.stdout


@test
def clear_and_tls_edges_reach_one_daemon_with_one_filter_set(env):
    clear, tls = env.port(), env.port()
    c = it.tls_certs(env)["proxy"]
    env.service("edges", "http", clear,
                ("--layer", "proxy", "--addr", "%s:%d,tcp" % (SRV4, clear),
                 "--addr", "%s:%d,tls,to=%d" % (SRV4, tls, clear), "--tls-cert", c[0],
                 "--tls-key", c[1], "--upstream", "plain,http1"))
    env.filter("edges", r"GET /evil[0-9]+ HTTP/1\.1", dir="c2s")
    doc = env.ctl("service", "show", "edges")
    addrs = [(a.get("text"), a.get("edge"), a.get("to_port")) for a in doc.get("addrs", [])]
    check(addrs == [("%s:%d,tcp" % (SRV4, clear), "tcp", None),
                    ("%s:%d,tls,to=%d" % (SRV4, tls, clear), "tls", clear)],
          "service show --json addrs %r", addrs)
    txt = env.ctl_raw("service", "show", "edges", json_out=False).stdout
    check("%s:%d,tls,to=%d" % (SRV4, tls, clear) in txt, "service show: %s", txt)
    log, p = h1_daemon(env, clear)
    try:
        cases = (("http://%s:%d" % (SRV4, clear), "--http1.1", "1.1"),
                 ("https://%s:%d" % (SRV4, tls), "--http1.1", "1.1"),
                 ("https://%s:%d" % (SRV4, tls), "--http2", "2"))
        for base, mode, ver in cases:
            rc, out = curl(env, base + "/", mode)
            check(rc == 0 and out == "hello from h1\n\n" + ver, "innocent %s %s: rc %d %r",
                  base, mode, rc, out)
            rc, out = curl(env, base + "/evil1337", mode)
            check(rc != 0 and "hello" not in out, "the evil request passed %s %s: %r", base,
                  mode, out)
        reqs = seen(log)
        # the one daemon got the three innocent requests (the TLS edge's on its own port) and
        # no evil one
        check([(q["port"], q["path"]) for q in reqs] == [(clear, "/")] * 3,
              "the daemon got %r", reqs)
        evs = [e for e in env.ctl("events") if e.get("service") == "edges"]
        got = sorted((e.get("edge"), e.get("dport")) for e in evs)
        check(got == [("tcp", clear), ("tls", tls), ("tls", tls)],
              "the events name edges %r: %r", got, evs)
        txt = env.ctl_raw("events", json_out=False).stdout
        check(" tls " in txt and " tcp " in txt, "events does not name the edge: %s", txt[-800:])
    finally:
        p.terminate()
        p.wait(5)
    # its TLS edge needs the certificate
    r = env.ctl_raw("service", "set", "edges", "--no-tls", json_out=False)
    check(r.returncode != 0 and "TLS edge" in r.stderr, "--no-tls with a TLS edge: %r", r.stderr)
    # a backup keeps the edges
    out = os.path.join(env.tmp, "edges-export.json")
    r = env.ctl_raw("export", out, json_out=False)
    check(r.returncode == 0, "export: %r", r.stderr)
    with open(out) as f:
        svc = [s for s in json.load(f)["services"] if s["name"] == "edges"][0]
    check(svc.get("addrs") == ["%s:%d,tcp" % (SRV4, clear),
                               "%s:%d,tls,to=%d" % (SRV4, tls, clear)], "export: %r", svc)


@test
def an_edge_is_refused_where_nothing_acts_on_it(env):
    port = env.port()
    r = env.ctl_raw("service", "add", "e-nfq", "--proto", "tcp", "--addr",
                    "%s:%d,tls" % (SRV4, port), json_out=False)
    check(r.returncode != 0 and "--layer proxy" in r.stderr, "nfqueue + tls edge: %r", r.stderr)
    r = env.ctl_raw("service", "add", "e-udp", "--proto", "udp", "--layer", "proxy", "--addr",
                    "%s:%d,to=%d" % (SRV4, port, port + 1), json_out=False)
    check(r.returncode != 0 and "TCP" in r.stderr, "udp + to=: %r", r.stderr)
    r = env.ctl_raw("service", "add", "e-nocert", "--proto", "http", "--layer", "proxy",
                    "--addr", "%s:%d,tls" % (SRV4, port), json_out=False)
    check(r.returncode != 0 and "--tls-cert" in r.stderr, "tls edge, no cert: %r", r.stderr)
    r = env.ctl_raw("service", "add", "e-bad", "--proto", "http", "--layer", "proxy", "--addr",
                    "%s:%d,quic" % (SRV4, port), json_out=False)
    check(r.returncode != 0 and ",tls" in r.stderr, "quic: %r", r.stderr)
    # added to a running service: the same checks
    env.service("e-run", "http", port, ("--layer", "proxy"))
    r = env.ctl_raw("service", "addr", "add", "e-run", "%s:%d,tls" % (SRV4, port + 1),
                    json_out=False)
    check(r.returncode != 0 and "--tls-cert" in r.stderr, "addr add tls edge: %r", r.stderr)
    env.ctl("service", "addr", "add", "e-run", "%s:%d,tcp,to=%d" % (SRV4, port + 1, port))
    r = env.ctl_raw("service", "set", "e-run", "--layer", "nfqueue", "--proto", "tcp",
                    json_out=False)
    check(r.returncode != 0 and "edge" in r.stderr, "set --layer nfqueue with edges: %r",
          r.stderr)


if __name__ == "__main__":
    rc = it.run_module("test_edges")
    sys.exit(rc)
