#!/usr/bin/python3
"""Integration: the game's facts (issue 28, point 1): `fgexctl game set/show` kept in controld's
store across restarts, refused when wrong with nothing stored, byte for byte (a flag format that
is not UTF-8 comes back exactly, through `export` and `import` too), left alone by an older
backup without them, and set by controld's --game-* options (and its configuration file) at
every start."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import check, test  # noqa: E402

FLAG = "[A-Z0-9]{31}="
# a flag format with bytes that are not UTF-8 (0xff, 0xc3 alone): argv carries them as they are
FLAG_BYTES = b"FLG\xff[a-f0-9]{8}\xc3x"


def game(env):
    return env.ctl("game", "show")


def ctl_fail(env, *args):
    p = env.ctl_raw(*args, json_out=False)
    check(p.returncode != 0, "fgexctl %s succeeded: %r", " ".join(map(str, args)), p.stdout)
    return p


@test
def game_none_on_a_fresh_store(env):
    g = game(env)
    check(g == {"set": False, "checker": [], "team": []}, "a fresh store's game: %r", g)
    p = env.ctl_raw("game", "show", json_out=False)
    check(p.returncode == 0 and "no game set" in p.stdout, "game show: %r %r", p.stdout, p.stderr)


@test
def game_set_show(env):
    g = env.ctl("game", "set", "--flag", FLAG, "--checker", "10.77.0.0/24", "fd00:77::5",
                "--team", "10.60.1.0/24,10.60.2.0/24", "--checker=10.99.0.1")
    check(g["set"] and g["flag"] == FLAG, "game set's reply: %r", g)
    check(g["checker"] == ["10.77.0.0/24", "fd00:77::5", "10.99.0.1"], "checker: %r", g["checker"])
    check(g["team"] == ["10.60.1.0/24", "10.60.2.0/24"], "team: %r", g["team"])
    check(g["set_time"] > 0, "set_time: %r", g)
    check(game(env) == g, "game show %r, not what set replied %r", game(env), g)
    p = env.ctl_raw("game", "show", json_out=False)
    check(p.stdout.startswith("flag ") and FLAG in p.stdout and "10.60.2.0/24" in p.stdout,
          "game show for a human: %r", p.stdout)
    hist = env.ctl("history")
    check(any(h["kind"] == "setting" and h["what"].startswith("game set: a flag format of 13 "
                                                              "bytes, 3 checker and 2 team")
              for h in hist), "the history does not say the game was set: %r", hist[-3:])


@test
def game_refused_stores_nothing(env):
    env.ctl("game", "set", "--flag", FLAG, "--checker", "10.77.0.0/24")
    before = game(env)
    p = ctl_fail(env, "game", "set", "--flag", "ab(c", "--checker", "10.77.0.2")
    check(p.returncode == 4 and "invalid flag format" in p.stderr, "a bad regex: %r", p.stderr)
    # a flag format that matches any stream would make every connection a stolen flag
    for rx in ("x*", "\\b"):
        p = ctl_fail(env, "game", "set", "--flag", rx, "--checker", "10.77.0.2")
        check("every connection" in p.stderr or "matches any stream" in p.stderr, "%s: %r", rx,
              p.stderr)
    p = ctl_fail(env, "game", "set", "--flag", FLAG, "--checker", "10.77.0.1/24")
    check("invalid checker address" in p.stderr, "host bits: %r", p.stderr)
    p = ctl_fail(env, "game", "set", "--flag", FLAG, "--checker", "nowhere")
    check(p.returncode == 4 and "--checker takes addresses" in p.stderr, "a name: %r", p.stderr)
    p = ctl_fail(env, "game", "set", "--flag", FLAG)
    check(p.returncode == 2 and "--checker" in p.stderr, "no checker: %r", p.stderr)
    p = ctl_fail(env, "game", "set", "--clear", "--flag", FLAG)
    check(p.returncode == 2, "--clear with --flag: %r", p.stderr)
    check(game(env) == before, "a refused set changed the game: %r, was %r", game(env), before)


@test
def game_bytes_exact_through_backups(env):
    argv = [os.path.join(env.bin, "fgexctl"), "-c", env.url, "--json", "game", "set", "--flag",
            FLAG_BYTES, "--checker", "10.77.0.2", "--team", "10.60.0.0/16"]
    p = it.sh(*argv)
    g = json.loads(p.stdout)
    check("flag" not in g and it.d64(g.get("flag_b64")) == FLAG_BYTES,
          "the flag's bytes as set: %r", g)
    path = os.path.join(env.tmp, "game-backup.json")
    env.ctl("export", path)
    with open(path) as f:
        doc = json.load(f)
    check(it.d64(doc["game"]["flag_b64"]) == FLAG_BYTES and doc["game"]["checker"] ==
          ["10.77.0.2"] and doc["game"]["team"] == ["10.60.0.0/16"], "the backup's game: %r",
          doc.get("game"))
    env.ctl("game", "set", "--clear")
    check(not game(env)["set"], "game set --clear left %r", game(env))
    env.ctl("import", path)
    g2 = game(env)
    check(it.d64(g2.get("flag_b64")) == FLAG_BYTES and g2["checker"] == ["10.77.0.2"] and
          g2["team"] == ["10.60.0.0/16"], "after the import: %r", g2)
    # an older backup (no "game"): the game stays as it is
    del doc["game"]
    old = os.path.join(env.tmp, "old-backup.json")
    with open(old, "w") as f:
        json.dump(doc, f)
    env.ctl("import", old)
    check(game(env) == g2, "an older backup changed the game: %r", game(env))
    # a backup taken with no game set clears it
    env.ctl("game", "set", "--clear")
    env.ctl("export", path)
    with open(path) as f:
        check(json.load(f)["game"] == {}, "a backup without a game")
    env.ctl("game", "set", "--flag", FLAG, "--checker", "10.77.0.2")
    env.ctl("import", path)
    check(not game(env)["set"], "importing a backup with no game left %r", game(env))
    # a wrong game in a backup is refused with the rest: nothing is imported
    doc["game"] = {"flag": "ab(c", "checker": ["10.77.0.2"]}
    with open(old, "w") as f:
        json.dump(doc, f)
    p = ctl_fail(env, "import", old)
    check("invalid flag format" in p.stderr, "a backup's bad flag: %r", p.stderr)
    check(not game(env)["set"], "a refused import set %r", game(env))


@test
def game_kept_across_restarts(env):
    g = env.ctl("game", "set", "--flag", FLAG, "--checker", "10.77.0.0/24", "--team",
                "fd00:60::/32")
    env.stop_controld()
    env.start_controld()
    check(game(env) == g, "after a restart: %r, was %r", game(env), g)
    # a store from before the game has no record: no game (a clear removes the record)
    env.ctl("game", "set", "--clear")
    env.stop_controld()
    env.start_controld()
    check(game(env) == {"set": False, "checker": [], "team": []}, "no record: %r", game(env))


@test
def game_from_options_and_config_file(env):
    env.stop_controld()
    env.start_controld(extra_args=["--game-flag", "FLAG_[a-f0-9]{8}", "--game-checker",
                                   "10.77.0.9", "--game-checker", "fd00:77::9", "--game-team",
                                   "10.60.0.0/16"])
    g = game(env)
    check(g["flag"] == "FLAG_[a-f0-9]{8}" and g["checker"] == ["10.77.0.9", "fd00:77::9"] and
          g["team"] == ["10.60.0.0/16"], "the options' game: %r", g)
    env.stop_controld()
    conf = os.path.join(env.tmp, "game.conf")
    with open(conf, "w") as f:
        f.write("# the game\ngame-flag = ENO[A-Za-z0-9+/=]{48}\ngame-checker = 10.77.0.10\n")
    env.start_controld(extra_args=["--config", conf])
    g = game(env)
    check(g["flag"] == "ENO[A-Za-z0-9+/=]{48}" and g["checker"] == ["10.77.0.10"] and
          g["team"] == [], "the file's game: %r", g)
    env.stop_controld()
    # a wrong one stops the start, with the reason
    bad = os.path.join(env.tmp, "bad.conf")
    with open(bad, "w") as f:
        f.write("game-flag = ab(c\ngame-checker = 10.77.0.10\n")
    try:
        env.start_controld(extra_args=["--config", bad], timeout=5)
        raise AssertionError("controld started with a bad game-flag")
    except RuntimeError as e:
        check("invalid flag format" in str(e), "the refusal: %s", str(e)[-400:])
    env.controld = None
    env.start_controld()
    check(game(env)["flag"] == "ENO[A-Za-z0-9+/=]{48}", "the stored game after a plain start")


if __name__ == "__main__":
    sys.exit(it.run_module("game"))
