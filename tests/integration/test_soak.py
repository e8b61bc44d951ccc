#!/usr/bin/python3
"""Integration: bench/soak (issue 25), the 2-minute run `make test` owes.

bench/soak builds its own namespaces and controld (fgxbench's World), runs both layers, a TLS
service and a scripted one under honest load, attacks and churn (rule changes, worker kills,
controld restarts, an import), and prints a PASS/FAIL line per check. This module first proves
that each check can fail (`--selftest`: every check on synthetic data, clean and with the fault
it exists to find), then runs the soak for two minutes and requires every check to pass."""
# fgx-it-timeout: 420
import os
import subprocess
import sys
import shutil
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import check, test  # noqa: E402

SOAK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "soak")
CHECKS = ("honest", "no evil byte", "attacks ran", "no event lost", "counters monotonic",
          "flat memory, fds, threads", "recovery", "workers adopted", "churn",
          "workers running at the end")


def run(*args, timeout):
    return subprocess.run([it.PY, SOAK, *[str(a) for a in args]], capture_output=True,
                          text=True, timeout=timeout,
                          env=dict(os.environ, FGX_BIN=it.fgx_bin()))


@test
def soak_checks_fail_on_their_faults(env):
    p = run("--selftest", timeout=60)
    lines = p.stdout.splitlines()
    bad = [x for x in lines if not x.startswith("PASS ")]
    check(p.returncode == 0 and not bad, "selftest exit %d: %s %s", p.returncode, bad[:5],
          p.stderr[-500:])
    # a fault for every check, and the clean case of each
    for name in ("evil byte reached", "event gap", "counter went down", "rss leak", "fd leak",
                 "honest failure outside its service's window", "worker not adopted",
                 "window slow", "churn error"):
        check(any(name in x and "-> FAIL" in x for x in lines), "selftest has no failing %r", name)
    check(len(lines) >= 28, "selftest ran only %d cases", len(lines))


@test
def soak_two_minutes(env):
    out = tempfile.mkdtemp(prefix="fgx-it-soak-")
    try:
        p = run("--minutes", 2, "--out", out, timeout=360)
        lines = p.stdout.splitlines()
        fails = [x for x in lines if x.startswith("FAIL ")]
        check(not fails, "soak failed:\n    %s\n%s", "\n    ".join(fails), p.stderr[-1500:])
        for name in CHECKS:
            check(any(x.startswith("PASS %s:" % name) for x in lines),
                  "no PASS line for check %r:\n%s", name, p.stdout[-2000:])
        check(p.returncode == 0, "soak exit %d with every check passed:\n%s", p.returncode,
              p.stderr[-1500:])
        with open(os.path.join(out, "soak.csv")) as f:
            rows = f.read().splitlines()
        check(len(rows) > 100, "soak.csv has %d samples for 120 s", len(rows) - 1)
    finally:
        if os.environ.get("FGX_IT_KEEP"):
            print("  (kept %s)" % out)
        else:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(it.run_module("test_soak"))
