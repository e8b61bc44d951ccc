#!/usr/bin/python3
"""Integration: the web dashboard in a real browser (issue 18). controld in the server namespace
serves the page over HTTPS (--web-listen 10.77.0.1:8443, --allow 10.77.0.2/32, a password);
Debian's chromium, headless, driven by playwright-core (tests/web/run.mjs), runs in the client
namespace, as a player's laptop. Each tests/web/scenarios/*.mjs is one test here: 10-core logs
in, adds a service and a filter, sends real traffic (the commands the scenario runs are given in
its env), sees the block arrive live, tests a regex on the capture, disables the filter and
downloads a pcap; 20-views takes screenshots of every view (laptop and phone, light and dark)
into build/web-shots/; 90-lockout is a wrong password refused and the address locked out.
After the browser, the state it made is checked with fgexctl.

FGX_WEB_SHOTS: where the screenshots go (default build/web-shots).
playwright-core is installed by deploy/install-deps.sh test (npm ci into build/web-node, or
FGX_WEB_NODE)."""
# fgx-it-timeout: 1200
# (a browser, every view at two widths in two themes, and the other engineers' scenarios too)
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
import fgxweb  # noqa: E402
from fgxit import CLI4, EVIL, HELPER, PY, SRV4, check, test  # noqa: E402

node_modules = fgxweb.node_modules

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
WEBTESTS = os.path.join(ROOT, "tests", "web")
WEB_PORT = 8443
BASE = "https://%s:%d" % (SRV4, WEB_PORT)
PASSWORD = "web-pw-123456"
# 15-traffic's payload: 60 000 bytes of every value but no "evil" (a few dozen packets)
BULK = bytes(i % 251 for i in range(60000))
ARGS = ["--web-listen", "%s:%d" % (SRV4, WEB_PORT), "--allow", "10.77.0.2/32"]
S = {}


def shots_dir():
    return os.environ.get("FGX_WEB_SHOTS") or os.path.join(os.path.dirname(it.fgx_bin()), "web-shots")


def wait_https(env, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = subprocess.run(["ip", "netns", "exec", env.cli, "curl", "-sk", "-o", "/dev/null", "-w",
                            "%{http_code}", BASE + "/api/session"], capture_output=True, text=True)
        if p.stdout.strip() == "401":
            return
        time.sleep(0.2)
    raise RuntimeError("the web server at %s did not answer: %s" % (BASE, env.log_tail(15)))


def setup(env):
    # what `make test` installs (deploy/install-deps.sh test): missing, every test fails
    for exe in ("node", "chromium"):
        if not shutil.which(exe):
            raise RuntimeError("%s is not installed (deploy/install-deps.sh test)" % exe)
    if not os.path.isdir(os.path.join(node_modules(), "playwright-core")):
        raise RuntimeError("playwright-core is not in %s (deploy/install-deps.sh test)" %
                           node_modules())
    pw = os.path.join(env.tmp, "pw")
    with open(pw, "w") as f:
        f.write(PASSWORD + "\n")
    env.ctl("passwd", "--password-file", pw)
    wait_https(env)
    S["port"] = env.port()
    S["port2"] = env.port() + 100
    key, cert = os.path.join(env.tmp, "k.pem"), os.path.join(env.tmp, "c.pem")
    it.sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
          "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=tlsweb.test")
    steps = json.dumps(["send:" + (b"GET /" + EVIL + b" HTTP/1.0\r\n\r\n").hex(), "shut"])
    envdoc = {
        "password": PASSWORD,
        "service": "web",
        "port": S["port"],
        "server": SRV4,
        "client": CLI4,
        "regex": it.REGEX,
        "test_regex": "evil13",
        "evil": EVIL.decode(),
        "port2": S["port2"],
        "bulk_bytes": len(BULK),
        "tls_cert": open(cert).read(),
        "tls_key": open(key).read(),
        "commands": {
            # run by the node side, which is in the client namespace already
            "evil": [PY, HELPER, "tcp-client", "--host", SRV4, "--port", str(S["port"]),
                     "--steps", steps, "--timeout", "3"],
            # 15-traffic: BULK bytes that no filter matches, one connection ("ok\n" back)
            "bulk": [PY, HELPER, "tcp-client", "--host", SRV4, "--port", str(S["port"]),
                     "--steps", json.dumps(["send:" + BULK.hex(), "shut"]), "--timeout", "5"],
            "raw": [PY, HELPER, "tcp-client", "--host", SRV4, "--port", str(S["port"]),
                    "--steps", json.dumps(["send:" + (b"\x00\x01 \xff\xfezq tail").hex(),
                                           "shut"]), "--timeout", "3"],
        },
    }
    S["env"] = os.path.join(env.tmp, "web-env.json")
    with open(S["env"], "w") as f:
        json.dump(envdoc, f)
    os.makedirs(shots_dir(), exist_ok=True)


class Runner:
    """One node (tests/web/run.mjs --stdin) and one chromium for every scenario, in the client
    namespace: each scenario name written is run, its result line read back."""

    def __init__(self, env):
        self.log = os.path.join(env.tmp, "run-mjs.log")
        self.err = open(self.log, "w")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", env.cli, "env", "FGX_WEB_NODE_MODULES=" + node_modules(),
             "node", os.path.join(WEBTESTS, "run.mjs"), "--base", BASE, "--env", S["env"],
             "--shots", shots_dir(), "--stdin", "1"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True, bufsize=1)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for ln in self.proc.stdout:
            if ln.startswith("{"):
                self.lines.put(json.loads(ln))
        self.lines.put(None)

    def log_tail(self, n=1500, since=0):
        """What run.mjs said on stderr (from offset since), its last n characters."""
        with open(self.log, errors="replace") as f:
            f.seek(since)
            return f.read()[-n:]

    def run(self, name, timeout):
        mark = os.path.getsize(self.log)
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        try:
            r = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("scenario %s gave no result in %ss: %s" % (name, timeout,
                                                                          self.log_tail()))
        check(r is not None, "run.mjs ended (exit %s): %s", self.proc.poll(), self.log_tail())
        check(r["scenario"] == name, "run.mjs answered %r for %s", r["scenario"], name)
        return r, mark

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def scenario(name, timeout=240):
    """Run tests/web/scenarios/NAME.mjs in chromium; its screenshots go to build/web-shots."""
    def run(env):
        if S.get("runner") is None or S["runner"].proc.poll() is not None:
            S["runner"] = Runner(env)
        r, mark = S["runner"].run(name, timeout)
        if not r["ok"]:
            said = S["runner"].log_tail(800, since=mark)
            raise AssertionError("scenario %s failed: %s\n%s" % (name, r["error"], said))
    run.__name__ = "scenario_" + name.replace("-", "_")
    return run


def state_after_core(env):
    """What the browser did is in controld: the service, its filter (disabled), the block."""
    svc = env.service_doc("web")
    check(svc["port"] == S["port"] and svc["proto"] == "tcp", "service web: %r", svc)
    fl = env.filters("web")
    check(len(fl) == 1 and fl[0]["regex"] == it.REGEX, "filters of web: %r", fl)
    check(not fl[0]["active"], "the filter the page disabled is active: %r", fl[0])
    check(fl[0]["blocked"] == 2, "the filter did not count the 2 blocks: %r", fl[0])
    evs = env.ctl("events", "web")
    check(any(e["action"] == "block" and e["src"] == CLI4 for e in evs), "no block event: %r", evs)
    # the second connection (filter disabled) reached the server whole
    it.server_conn_starting(S["server"], b"GET /" + EVIL)


def state_after_manage(env):
    svc = env.service_doc("admin")
    check(svc["port"] == S["port2"] + 1 and svc["status"] == "active", "service admin: %r", svc)
    check([a["text"] for a in svc["addrs"]] == ["%s:%d" % (SRV4, S["port2"] + 1)],
          "the addresses of admin: %r", svc["addrs"])
    fl = {f.get("regex"): f for f in env.filters("admin")}
    check(set(fl) == {"sqli[0-9]", "foo[0-9]+", "baz\\x42"}, "filters of admin: %r", list(fl))
    lf = fl["sqli[0-9]"]
    check(lf["action"] == "log" and lf["label"] == "team12 sqli" and lf["dir"] == "c2s" and
          lf["nocase"], "the log filter: %r", lf)
    check(fl["foo[0-9]+"]["dir"] == "c2s" and fl["baz\\x42"]["nocase"], "imported: %r", fl)
    # edited in place on the page (issue 27)
    check(fl["baz\\x42"]["revision"] == 1 and fl["baz\\x42"]["dir"] == "both",
          "the filter edited on the page: %r", fl["baz\\x42"])
    tls = env.service_doc("tlsweb")
    check(tls["tls"] and tls["layer"] == "proxy" and "tlsweb.test" in tls.get("tls_subject", ""),
          "service tlsweb: %r", tls)
    check(tls["limits"]["max_conns"] == 5 and tls["limits"]["over_limit"] == "forward" and
          tls["limits"]["first_byte_timeout"] == 7, "limits set on the page: %r", tls["limits"])


FP_RE = re.compile(r"TLS certificate SHA-256 fingerprint ((?:[0-9A-F]{2}:){31}[0-9A-F]{2})")


def web_certificate_is_controlds(env):
    """The browser takes any certificate (run.mjs): here the one served is checked to be the
    one controld logged, as a player compares it with `fgexctl cert`."""
    with open(env.log_path, "rb") as f:
        logged = FP_RE.findall(f.read().decode(errors="replace"))
    check(logged, "controld logged no certificate fingerprint:\n%s", env.log_tail(10))
    p = subprocess.run(["ip", "netns", "exec", env.cli, "sh", "-c",
                        "openssl s_client -connect %s:%d </dev/null 2>/dev/null | "
                        "openssl x509 -noout -fingerprint -sha256" % (SRV4, WEB_PORT)],
                       capture_output=True, text=True, timeout=20)
    served = p.stdout.strip().rpartition("=")[2].upper()
    check(served == logged[-1], "the web listener serves %r, controld logged %s", served,
          logged[-1])


test(web_certificate_is_controlds)


def state_after_scripts_live(env):
    """The script's block held on the service's side: once every connection the server took
    ended, none of them carried the client's bytes (the scenario saw the client reset)."""
    srv = S["server"]
    it.wait_until(lambda: len(srv.all("conn")) == len(srv.all("accept")), timeout=5)
    conns = [(e["id"], it.d64(e["data"]), e["end"]) for e in srv.all("conn")]
    check(len(conns) == len(srv.all("accept")), "server connections still open: %d accepted, "
          "%d ended", len(srv.all("accept")), len(conns))
    check(not any(EVIL in d for _, d, _ in conns), "the script's block let bytes through: %r",
          conns)


# what the page did, checked in controld after the scenario
AFTER = {"10-core": state_after_core, "30-manage": state_after_manage,
         "b_scripts_live": state_after_scripts_live}


def scenario_test(name):
    run = scenario(name)

    def t(env):
        # the service's server (the runner stops helpers after each test)
        S["server"] = env.tcp_server(S["port"], reply=b"ok\n", idle=2.0)
        run(env)
        if name in AFTER:
            AFTER[name](env)
    t.__name__ = run.__name__
    return t


# every scenario (uib's among them) in name order: the numbered ones, then the b_ ones (digits
# sort first); 90-lockout waits its lockout out and logs in again, so the b_ ones that follow
# find the address free
for f in sorted(os.listdir(os.path.join(WEBTESTS, "scenarios"))):
    if f.endswith(".mjs"):
        test(scenario_test(f[:-4]))


if __name__ == "__main__":
    try:
        rc = it.run_module("test_web_ui", setup=setup, controld_args=ARGS)
    finally:
        if S.get("runner"):
            S["runner"].close()
    sys.exit(rc)
