"""deploy/ and the test and bench scripts under `set -o pipefail` (issue 24, item 6).

`make run` failed about one time in three with `Error 141`: deploy/run.sh piped controld --help
into `sed -n '/^defaults:/q;p'`, which quits before controld has written everything, so controld
died of SIGPIPE and pipefail failed the script. These tests repeat that start-up step, then the
whole script, 50 times each, start and stop a controld with run.sh/stop.sh in a state and run
directory of their own (in the client namespace, where no other controld runs: never the host's
/run/fgex or /var/lib/fgex), and check that no script make runs pipes into a reader that can
quit early.
"""
import os
import re
import subprocess
import sys

import fgxit as it
from fgxit import check, test

ROOT = os.path.abspath(os.path.join(it.HERE, "..", ".."))
RUN_SH = os.path.join(ROOT, "deploy", "run.sh")
STOP_SH = os.path.join(ROOT, "deploy", "stop.sh")
TRIES = 50


def _synopsis_step():
    """The exact line of run.sh that reads controld's synopsis."""
    with open(RUN_SH) as f:
        lines = [x.strip() for x in f if x.strip().startswith("synopsis=")]
    check(len(lines) == 1, "run.sh has %d synopsis= lines, expected 1: %r", len(lines), lines)
    return lines[0]


@test
def run_sh_synopsis_step_passes_50_times_under_pipefail(env):
    step = _synopsis_step()
    script = 'set -euo pipefail\nbin=%s\n%s\nprintf "%%s" "$synopsis"\n' % (env.bin, step)
    for i in range(TRIES):
        p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=10)
        check(p.returncode == 0, "try %d of %d: the synopsis step exited %d (141 is SIGPIPE): %r",
              i + 1, TRIES, p.returncode, p.stderr[-300:])
        check("--state-dir" in p.stdout and "--run-dir" in p.stdout,
              "try %d: the synopsis lacks the options: %r", i + 1, p.stdout[:300])
        check("defaults:" not in p.stdout, "try %d: the synopsis runs past it: %r", i + 1,
              p.stdout[-300:])


@test
def run_sh_passes_50_times_beside_a_running_controld(env):
    # The whole script, up to "already running" (the test's controld answers on RUN_DIR): every
    # step but the start of controld, which the next test makes.
    for i in range(TRIES):
        p = it.sh("ip", "netns", "exec", env.srv, RUN_SH, env.bin, "RUN_DIR=" + env.run_dir,
                  "CONFIG=/dev/null", check=False, timeout=20)
        check(p.returncode == 0, "try %d of %d: run.sh exited %d: %r", i + 1, TRIES,
              p.returncode, (p.stdout + p.stderr)[-400:])
        check("already running" in p.stdout, "try %d: run.sh did not find the running "
              "controld: %r", i + 1, p.stdout[-400:])


@test
def run_sh_starts_and_stop_sh_stops_in_dirs_of_its_own(env):
    base = os.path.join(env.tmp, "make-run")
    state, run = os.path.join(base, "state"), os.path.join(base, "run")
    os.makedirs(state)
    os.makedirs(run)
    url = "ipc://" + os.path.join(run, "control.sock")
    try:
        p = it.sh("ip", "netns", "exec", env.cli, RUN_SH, env.bin, "RUN_DIR=" + run,
                  "STATE_DIR=" + state, "CONFIG=/dev/null", "THREADS=1", check=False, timeout=30)
        check(p.returncode == 0, "run.sh exited %d: %r", p.returncode,
              (p.stdout + p.stderr)[-400:])
        check("controld started" in p.stdout, "run.sh did not start controld: %r", p.stdout[-400:])
        st = it.sh(os.path.join(env.bin, "fgexctl"), "-c", url, "--json", "status", check=False)
        check(st.returncode == 0 and '"version"' in st.stdout, "the started controld does not "
              "answer on %s: %r", url, st.stdout + st.stderr)
    finally:
        q = it.sh("ip", "netns", "exec", env.cli, STOP_SH, "RUN_DIR=" + run, check=False,
                  timeout=20)
    check(q.returncode == 0 and "controld stopped" in q.stdout, "stop.sh exited %d: %r",
          q.returncode, q.stdout + q.stderr)
    check(not os.path.exists(os.path.join(run, "controld.pid")), "controld.pid left behind")


# Readers that may exit before their writer is done: `head`, `grep -q`/`-m`, a sed that quits.
EARLY = re.compile(r"\|\s*(head\b|grep\s+(-[a-zA-Z]*[qm]|--quiet|--max-count)|"
                   r"sed\s+(-[a-zA-Z]+\s+)*'[^']*q[;']|awk\s.*\bexit\b)")


def _scripts():
    out = []
    for d in ("deploy", "tests", os.path.join("tests", "integration"), ".ci", "bench"):
        full = os.path.join(ROOT, d)
        for name in sorted(os.listdir(full)):
            path = os.path.join(full, name)
            if not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                head = f.readline()
            if head.startswith(b"#!") and (b"bash" in head or b"/sh" in head):
                out.append(path)
    return out


@test
def no_script_pipes_into_a_reader_that_quits_early(env):
    scripts = _scripts()
    check(RUN_SH in scripts and len(scripts) >= 6, "the script list is wrong: %r", scripts)
    bad = []
    for path in scripts:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                code = line.split("#", 1)[0] if line.lstrip().startswith("#") else line
                if EARLY.search(code):
                    bad.append("%s:%d: %s" % (os.path.relpath(path, ROOT), n, line.strip()))
    check(not bad, "pipelines whose reader can quit before the writer is done (SIGPIPE, "
          "a failure under pipefail):\n  %s", "\n  ".join(bad))
    # the pattern itself finds the line that failed
    check(EARLY.search("""x=$(controld --help | sed -n '/^defaults:/q;p')"""),
          "the check misses the pipeline of issue 24")


if __name__ == "__main__":
    sys.exit(it.run_module("deploy_run"))
