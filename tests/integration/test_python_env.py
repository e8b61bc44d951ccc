#!/usr/bin/python3
"""Integration (issue 24 item 5): fgex's Python parts run Debian's python3 whatever PATH a
player's shell has. controld (its script check and scriptworker's interpreters) and fgexctl's
`script test` are started with a foreign python3 first on PATH: a fake `python3` that prints
and exits non-zero, in a venv-like directory (pyvenv.cfg beside bin/) that, were Python to take
it for its own, would hide Debian's dist-packages (h11). `script set` and script filtering on
both layers still work, and the fake was never run."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import check, test  # noqa: E402
from scriptfiles import FIREGEX_EXAMPLE, firegex_example_judges, pcap_conns  # noqa: E402


def foreign_python():
    """A venv-like directory with a fake bin/python3: (its bin dir, the marker the fake
    writes when it runs)."""
    d = tempfile.mkdtemp(prefix="fgx-foreign-py-")
    os.chmod(d, 0o755)
    b = os.path.join(d, "bin")
    os.makedirs(b)
    marker = os.path.join(d, "ran")
    with open(os.path.join(b, "python3"), "w") as f:
        f.write("#!/bin/sh\necho 'foreign python3 ran' >&2\ntouch %s\nexit 3\n" % marker)
    os.chmod(os.path.join(b, "python3"), 0o755)
    with open(os.path.join(d, "pyvenv.cfg"), "w") as f:
        f.write("home = %s\ninclude-system-site-packages = false\nversion = 3.11.2\n" % b)
    return b, marker


def foreign_env(bindir):
    """os.environ with bindir first on PATH, and what a venv's activate also sets."""
    e = dict(os.environ)
    e["PATH"] = bindir + ":" + e["PATH"]
    e["VIRTUAL_ENV"] = os.path.dirname(bindir)
    e["PYTHONHOME"] = os.path.dirname(bindir)
    return e


def with_path(env, bindir, fn):
    """fn() with controld (and what it starts) running under foreign_env(bindir); the test's
    own helpers (Python too) keep the runner's environment."""
    saved = dict(os.environ)
    try:
        env.stop_controld()
        foreign = foreign_env(bindir)
        os.environ.clear()
        os.environ.update(foreign)
        try:
            env.start_controld()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        fn()
    finally:
        env.stop_controld()
        env.start_controld()


@test
def script_set_and_filtering_with_a_foreign_python_on_path(env):
    bindir, marker = foreign_python()
    r = subprocess.run(["sh", "-c", "command -v python3"], capture_output=True, text=True,
                       env=foreign_env(bindir))
    check(r.stdout.strip() == os.path.join(bindir, "python3"), "the fake is not first: %r",
          r.stdout)

    def body():
        for layer, name in (("proxy", "pyenvpx"), ("nfqueue", "pyenvnfq")):
            port = env.port()
            env.service(name, "tcp", port=port, extra=("--layer", layer))
            firegex_example_judges(env, name, port, 0.3)
        log = env.log_tail(400)
        check("No module named" not in log, "an interpreter lost its modules:\n%s", log)
        # fgexctl script test (fgexctl runs the Python engine itself) under the same PATH
        pcap = os.path.join(tempfile.mkdtemp(prefix="fgx-pyenv-"), "t.pcap")
        pcap_conns(pcap)
        r = subprocess.run([os.path.join(env.bin, "fgexctl"), "script", "test",
                            FIREGEX_EXAMPLE, "--pcap", pcap], capture_output=True, text=True,
                           timeout=30, env=foreign_env(bindir))
        check(r.returncode == 0 and "reject" in r.stdout, "script test: rc %d %r %r",
              r.returncode, r.stdout, r.stderr)
        check(not os.path.exists(marker), "the foreign python3 was run")

    with_path(env, bindir, body)


if __name__ == "__main__":
    sys.exit(it.run_module("test_python_env"))
