#!/usr/bin/python3
"""Integration: the administration a team needs (issue 5). Export the whole configuration of
one controld and import it, over TLS, into a fresh controld in a second world of its own (its
first password given with --init-password), which then has the same services and filters and
filters traffic; a malformed import changes nothing; ruleset files load all or nothing, name the
bad line, --replace and round-trip through filter export; --local-auth makes the local socket
ask for a login too."""
import atexit
import json
import os
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, check, test  # noqa: E402

PORT = 7443
URL = "tls+tcp://%s:%d" % (SRV4, PORT)
PW = "fresh-pw-4242"

# filled by setup: the second world ("fresh") and the files shared between tests
S = {}


def run_fgexctl(env, ns, url, home, *args, json_out=True, timeout=20):
    """fgexctl with a HOME of its own; ns None runs it here (the local ipc socket)."""
    argv = ([] if ns is None else ["ip", "netns", "exec", ns]) + [
        "env", "-u", "FGEX_CONFIG_DIR", "-u", "FGEX_URL", "HOME=" + home,
        os.path.join(env.bin, "fgexctl"), "-c", url]
    if json_out:
        argv.append("--json")
    argv += [str(a) for a in args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def expect(p, code, what):
    check(p.returncode == code, "fgexctl %s -> exit %d, expected %d (stdout %r, stderr %r)", what,
          p.returncode, code, p.stdout[:200], p.stderr.strip()[:400])
    if code != 0:
        check(p.stdout == "", "a failed fgexctl %s printed on stdout: %r", what, p.stdout[:200])
    return p


def home_of(env, name):
    h = os.path.join(env.tmp, "home-" + name)
    os.makedirs(h, exist_ok=True)
    return h


def remote(env, home, code, *args, json_out=True):
    """fgexctl in env's client namespace against env's TLS listener."""
    p = run_fgexctl(env, env.cli, URL, home, *args, json_out=json_out)
    return expect(p, code, " ".join(map(str, args)))


def local(env, home, code, *args, json_out=True):
    p = run_fgexctl(env, None, env.url, home, *args, json_out=json_out)
    return expect(p, code, " ".join(map(str, args)))


def spawn_controld(env, extra, stdin_data=None, timeout=10):
    """Start controld in env's server namespace with extra options (and stdin), and wait for
    its control socket; the caller decides what "ready" means (--local-auth refuses status)."""
    exe = os.path.join(env.bin, "controld")
    sock = os.path.join(env.run_dir, "control.sock")
    if os.path.exists(sock):
        os.unlink(sock)
    log = open(env.log_path, "ab")
    env.log_offset = os.path.getsize(env.log_path)
    env.controld = subprocess.Popen(
        ["ip", "netns", "exec", env.srv, exe, "--config", "/dev/null", "--state-dir",
         env.state_dir, "--run-dir", env.run_dir, "--threads", "2", "--foreground", "--log-level", "debug"] + extra,
        stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL, stdout=log,
        stderr=log)
    log.close()
    if stdin_data is not None:
        env.controld.stdin.write(stdin_data)
        env.controld.stdin.close()
    ok = it.wait_until(lambda: env.controld.poll() is not None or os.path.exists(sock),
                       timeout=timeout)
    check(ok and env.controld.poll() is None, "controld did not start:\n%s", env.log_tail(15))


def nfq_running(st):
    return any(w.get("kind") == "nfq" and w.get("state") == "running" for w in st["workers"])


def wait_nfq(fn, timeout=10):
    """Poll a status getter until the nfq worker runs."""
    def ready():
        try:
            return nfq_running(fn())
        except (AssertionError, ValueError, it.CtlError):
            return False
    check(it.wait_until(ready, timeout=timeout, step=0.1), "no running nfq worker")


def setup(env):
    fresh = it.Env("admin2")
    atexit.register(fresh.down)
    S["fresh"] = fresh
    fresh.up()
    spawn_controld(fresh, ["--listen", URL, "--init-password"], (PW + "\n").encode())
    wait_nfq(lambda: fresh.ctl("status"))
    S["pw"] = os.path.join(env.tmp, "pw")
    with open(S["pw"], "w") as f:
        f.write(PW + "\n")
    S["home"] = home_of(env, "laptop")
    # the laptop logs in to the fresh controld with the password given by --init-password
    remote(fresh, S["home"], 0, "login", "--password-file", S["pw"])


def strip(docs):
    """A list document without its counters (export carries none)."""
    return [{k: v for k, v in d.items() if k != "blocked"} for d in docs]


def config(env):
    svcs = env.services()
    return strip(svcs), {s["name"]: strip(env.filters(s["id"])) for s in svcs}


def texts(env):
    svcs = env.services()
    out = [env.ctl_raw("service", "list", json_out=False).stdout]
    for s in svcs:
        out.append(env.ctl_raw("filter", "list", s["id"], json_out=False).stdout)
    return out


@test
def export_import_round_trip_on_fresh_controld(env):
    fresh, home = S["fresh"], S["home"]
    _, p1 = env.service("web", "tcp")
    env.filter("web", "evil[0-9]+", dir="c2s")
    env.filter("web", "FLAG\\{[A-Za-z0-9]{31}=\\}", dir="s2c")
    env.filter("web", "\\.\\./\\.\\./", nocase=True)
    fid = env.filter("web", "never/matches/ever")
    env.ctl("filter", "disable", fid)
    env.service("dns", "udp")
    env.filter("dns", "AAAA[0-9]{3}", dir="both")
    env.service("stopped", "tcp", extra=["--ip", SRV4, "--fail-open", "--midstream", "scan"])
    env.ctl("service", "stop", "stopped")
    env.service("empty", "udp")
    env.ctl("filter", "rm", env.filter("empty"))
    env.ctl("service", "rm", "--yes", "--yes", env.service("gone", "tcp")[0])  # a gap in the ids
    S["web_port"] = p1

    path = os.path.join(env.tmp, "cfg.json")
    d = env.ctl("export", path)
    check(d.get("services") == 4 and d.get("filters") == 5, "export --json: %r", d)
    mode = stat.S_IMODE(os.stat(path).st_mode)
    check(mode == 0o600, "export file mode %o", mode)
    with open(path) as f:
        raw = f.read()
    doc = json.loads(raw)
    check(doc.get("format") == "fgex-config" and doc.get("version") == 2, "header: %r",
          {k: doc.get(k) for k in ("format", "version")})
    for word in ("password", "hash", "session", "token", "$y$"):
        check(word not in raw.lower(), "the export holds %r", word)
    check([x.get("midstream") for x in doc["services"] if x["name"] == "stopped"] == ["scan"],
          "export lost --midstream scan: %r", doc["services"])
    S["cfg"] = path

    # the laptop restores it on the fresh controld, over TLS
    before = config(env)
    d = json.loads(remote(fresh, home, 0, "import", path).stdout)
    check(d.get("services") == 4 and d.get("filters") == 5, "import --json: %r", d)
    after = config(fresh)
    check(after == before, "after import:\n%r\nexported from:\n%r", after, before)
    check(texts(fresh) == texts(env), "service/filter list output differs:\n%s\n---\n%s",
          "".join(texts(fresh)), "".join(texts(env)))
    # and it filters: the imported c2s filter blocks on the fresh controld
    srv = fresh.tcp_server(p1)
    c = fresh.tcp_client(SRV4, p1, [b"x " + EVIL])
    it.assert_blocked(c, it.server_conn(srv, 1))
    c = fresh.tcp_client(SRV4, p1, [b"clean"])
    it.assert_passed(c, it.server_conn(srv, 2), b"clean")
    for h in fresh.helpers:
        h.stop()
    fresh.helpers = []


def bad_copy(env, name, mutate=None, text=None):
    path = os.path.join(env.tmp, name + ".json")
    if text is None:
        with open(S["cfg"]) as f:
            doc = json.load(f)
        mutate(doc)
        text = json.dumps(doc, indent=2)
    with open(path, "w") as f:
        f.write(text)
    return path


@test
def malformed_import_changes_nothing(env):
    fresh, home = S["fresh"], S["home"]
    check("cfg" in S, "needs the export of the round-trip test")
    before, before_txt = config(fresh), texts(fresh)
    with open(S["cfg"]) as f:
        good = f.read()
    cases = {
        # a trailing comma after the last service (strict JSON)
        "trailing-comma": bad_copy(env, "trailing", text=good.rstrip().rstrip("}").rstrip()
                                   .rstrip("]").rstrip() + ",\n  ]\n}\n"),
        "truncated": bad_copy(env, "truncated", text=good[:len(good) // 2]),
        "bad-regex": bad_copy(env, "badre", lambda d: d["services"][0]["filters"][0].update(
            regex="(bad")),
        "port-taken": bad_copy(env, "sameport", lambda d: d["services"][1].update(
            proto=d["services"][0]["proto"], port=d["services"][0]["port"])),
        "unknown-key": bad_copy(env, "unknownkey", lambda d: d["services"][0].update(prot="tcp")),
        "bad-port": bad_copy(env, "badport", lambda d: d["services"][2].update(port=70000)),
    }
    # and one that would remove everything, but also holds a bad regex at the end
    cases["empty-then-bad"] = bad_copy(env, "emptybad", lambda d: d.update(services=[{
        "name": "x", "proto": "tcp", "port": 1, "filters": [{"regex": "(bad"}]}]))
    # fgexctl's own checks say the file changed nothing; controld's (a regex, a port taken)
    # say why (the configuration is compared below in every case)
    reason = {"bad-regex": "(bad", "empty-then-bad": "(bad", "port-taken": "port"}
    for what, path in cases.items():
        # two services on one port: docs/fgexctl.md says 4 for import, 5 (exists) in general
        p = run_fgexctl(fresh, fresh.cli, URL, home, "import", path)
        expect(p, p.returncode if what == "port-taken" and p.returncode == 5 else 4,
               "import " + what)
        if what in reason:
            check(reason[what] in p.stderr, "%s: the error does not say why: %r", what,
                  p.stderr)
        else:
            check("nothing was changed" in p.stderr and "line " in p.stderr and
                  "column " in p.stderr, "%s: the error names no line and column, or does "
                  "not say nothing changed: %r", what, p.stderr)
        check(config(fresh) == before, "%s: the configuration changed", what)
    check(texts(fresh) == before_txt, "service/filter list output changed")
    # the data path still filters with what it had
    srv = fresh.tcp_server(S["web_port"])
    c = fresh.tcp_client(SRV4, S["web_port"], [b"y " + EVIL])
    it.assert_blocked(c, it.server_conn(srv, 1))


RULES_BAD4 = """# web rules
c2s /evil[0-9]+/

c2x /typo[0-9]+/
s2c /FLAG\\{[A-Za-z0-9]{31}=\\}/
"""

RULES_GOOD = ("# loaded at game start\r\n"
              "c2s /evil[0-9]+/\r\n"
              "\r\n"
              "   s2c nocase /FLAG\\{[a-z0-9]{31}=\\}/  \r\n"
              "nocase c2s /\\.\\./\\.\\./etc/passwd/\r\n"
              "both disabled /AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA/\r\n"
              "/sp ace s/\r\n")

WANT_GOOD = [("evil[0-9]+", "c2s", False, True),
             ("FLAG\\{[a-z0-9]{31}=\\}", "s2c", True, True),
             ("\\.\\./\\.\\./etc/passwd", "c2s", True, True),
             ("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "both", False, False),
             ("sp ace s", "both", False, True)]


def rules(env, name, text):
    path = os.path.join(env.tmp, name + ".rules")
    with open(path, "w", newline="") as f:
        f.write(text)
    return path


def tuples(filters):
    return sorted((f["regex"], f["dir"], f["nocase"], f["active"]) for f in filters)


@test
def ruleset_file_bad_line_changes_nothing(env):
    env.service("rs", "tcp")
    env.filter("rs", "keep[0-9]+", dir="s2c")
    before = env.filters("rs")
    bad = {
        4: rules(env, "bad4", RULES_BAD4),
        2: rules(env, "noclose", "c2s /ok/\nc2s /missing-close\n"),
        3: rules(env, "badre", "c2s /ok/\n# fine\nc2s /(bad/\n"),
        1: rules(env, "twice", "c2s s2c /x/\n"),
        5: rules(env, "trailing", "c2s /a/\nc2s /b/\nc2s /c/\nc2s /d/\nc2s /e/ junk\n"),
    }
    for line, path in sorted(bad.items()):
        for extra in ([], ["--replace"]):
            p = expect(env.ctl_raw("filter", "import", "rs", path, *extra), 4,
                       "filter import %s %s" % (os.path.basename(path), " ".join(extra)))
            check("line %d" % line in p.stderr, "%s: the error does not name line %d: %r",
                  os.path.basename(path), line, p.stderr)
            check(env.filters("rs") == before, "%s%s changed the filters: %r",
                  os.path.basename(path), " --replace" if extra else "", env.filters("rs"))
    p = env.ctl_raw("filter", "import", "rs", bad[4], json_out=False)
    check("c2x" in p.stderr, "the error does not show the bad word: %r", p.stderr)


@test
def ruleset_file_loads_replaces_and_round_trips(env):
    home = S["home"]
    fresh = S["fresh"]
    good = rules(env, "good", RULES_GOOD)
    # over TLS from the laptop, into the fresh controld's web service
    svc = "web"
    before = fresh.filters(svc)
    # a line identical to a filter the service has is refused, naming it (issue 14)
    same = [(r, d, n) for r, d, n, _ in WANT_GOOD]
    dup = [f for f in before if (f["regex"], f["dir"], f["nocase"]) in same]
    if dup:
        p = remote(fresh, home, 5, "filter", "import", svc, good)
        check("identical to filter %d" % dup[0]["id"] in p.stderr, "duplicate refusal: %r",
              p.stderr)
        check(fresh.filters(svc) == before, "a refused import changed the filters")
        for f in dup:
            remote(fresh, home, 0, "filter", "rm", f["id"])
        before = fresh.filters(svc)
    d = json.loads(remote(fresh, home, 0, "filter", "import", svc, good).stdout)
    check(tuples(d) == tuples(fresh.filters(svc)), "filter import --json: %r", d)
    got = fresh.filters(svc)
    check(len(got) == len(before) + 5, "%d filters after adding 5 to %d", len(got), len(before))
    check(all(t in tuples(got) for t in tuples(before)), "the old filters are gone")
    # --replace: exactly the file's filters
    remote(fresh, home, 0, "filter", "import", svc, good, "--replace")
    check(tuples(fresh.filters(svc)) == sorted(WANT_GOOD), "after --replace: %r",
          tuples(fresh.filters(svc)))
    # filter export round-trips through filter import --replace
    out = remote(fresh, home, 0, "filter", "export", svc, json_out=False).stdout
    check("/evil[0-9]+/" in out, "filter export: %r", out)
    exported = rules(env, "exported", out)
    local_svc, port = env.service("rt", "tcp")
    env.filter("rt", "dropped[0-9]", dir="both")
    env.ctl("filter", "import", "rt", exported, "--replace")
    check(tuples(env.filters("rt")) == sorted(WANT_GOOD), "round trip: %r",
          tuples(env.filters("rt")))
    out2 = env.ctl_raw("filter", "export", "rt", json_out=False).stdout

    def body(t):
        return [ln for ln in t.splitlines() if not ln.startswith("#")]
    check(body(out2) == body(out) and len(body(out)) == 5, "export after the round trip differs:\n%s---\n%s", out2, out)
    # the loaded filters filter: evil c2s blocked, the disabled one is not
    srv = env.tcp_server(port)
    c = env.tcp_client(SRV4, port, [b"q=" + EVIL])
    it.assert_blocked(c, it.server_conn(srv, 1))
    c = env.tcp_client(SRV4, port, [b"A" * 40])
    it.assert_passed(c, it.server_conn(srv, 2), b"A" * 40)


@test
def local_auth_needs_a_login(env):
    fresh = S["fresh"]
    lhome = home_of(env, "local")
    # ~/.config exists here: login_with_no_config_dir covers a bare HOME
    os.makedirs(os.path.join(lhome, ".config"), exist_ok=True)
    fresh.stop_controld(signal.SIGTERM)
    spawn_controld(fresh, ["--listen", URL, "--local-auth"])
    deadline = time.monotonic() + 10
    while True:
        p = run_fgexctl(fresh, None, fresh.url, lhome, "status")
        if p.returncode != 1 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    expect(p, 7, "status on the local socket with --local-auth")
    expect(run_fgexctl(fresh, None, fresh.url, lhome, "service", "list"), 7, "service list")
    expect(run_fgexctl(fresh, None, fresh.url, lhome, "auth", "off"), 7, "auth off")
    local(fresh, lhome, 0, "login", "--password-file", S["pw"])
    wait_nfq(lambda: json.loads(local(fresh, lhome, 0, "status").stdout))
    check(isinstance(json.loads(local(fresh, lhome, 0, "service", "list").stdout), list),
          "service list after login")
    # remote clients as before: their session outlived the restart (issue 24), and a login works
    remote(fresh, S["home"], 0, "status")
    remote(fresh, S["home"], 0, "login", "--password-file", S["pw"])
    remote(fresh, S["home"], 0, "status")


@test
def login_with_no_config_dir(env):
    """A first login from a HOME without ~/.config (a fresh vulnbox's root, or --ca, which
    writes no known_hosts first) must create the directories it stores the token in."""
    fresh = S["fresh"]
    check(fresh.controld is not None and fresh.controld.poll() is None,
          "needs the --local-auth controld of local_auth_needs_a_login")
    bare_l, bare_r = home_of(env, "bare-local"), home_of(env, "bare-ca")
    pl = run_fgexctl(fresh, None, fresh.url, bare_l, "login", "--password-file", S["pw"])
    pr = run_fgexctl(fresh, fresh.cli, URL, bare_r, "--ca",
                     os.path.join(fresh.state_dir, "tls-cert.pem"), "login", "--password-file",
                     S["pw"])
    check(pl.returncode == 0 and pr.returncode == 0, "login from a bare HOME: local -> %d %r; "
          "remote with --ca -> %d %r", pl.returncode, pl.stderr.strip(), pr.returncode,
          pr.stderr.strip())
    local(fresh, bare_l, 0, "status")
    remote(fresh, bare_r, 0, "status")


@test
def fresh_controld_exits_clean(env):
    fresh = S["fresh"]
    rc = fresh.stop_controld(signal.SIGTERM)
    check(rc == 0, "the fresh controld exited with %r on SIGTERM", rc)
    rep = fresh.sanitizer_report()
    check(not rep, "sanitizer report in the fresh controld's log:\n%s", rep)


if __name__ == "__main__":
    sys.exit(it.run_module("admin", setup=setup))
