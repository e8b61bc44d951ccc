"""python3 -I -c 'import sys; sys.path.insert(0, sys.argv[1]); import fgex.check as c;
sys.exit(c.main(sys.argv[2:]))' PYDIR FILENAME < SOURCE: checks a filter file and prints one JSON
object, {"ok": true, "functions": [...], "settings": {...}} or {"ok": false, "line": N,
"reason": "..."}. controld runs it in a process of its own, with a time limit, when a file is
set: a file's module code runs here, never inside controld."""
import json
import sys


def main(argv):
    filename = argv[0] if argv else "<script>"
    raw = sys.stdin.buffer.read()
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        print(json.dumps({"ok": False, "line": line, "reason": "not UTF-8 text"}))
        return 0
    # the file's prints must not mix with the answer
    out, sys.stdout = sys.stdout, sys.stderr
    try:
        from fgex.engine import Script, ScriptError
        try:
            s = Script(source, filename)
        except ScriptError as e:
            res = {"ok": False, "line": e.line, "reason": e.reason}
        else:
            res = {"ok": True, "functions": s.info(),
                   "settings": {k: (v.name if hasattr(v, "name") else v)
                                for k, v in s.settings.items()}}
    finally:
        sys.stdout = out
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
