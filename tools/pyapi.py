"""Build tool: the names a filter file can use, read from fgex's Python package itself, as JSON
for the page's script editor (completion and hover: web/views/scripts.js fetches
/lib/pyapi.json, which the build embeds into controld beside web/'s files). Nothing here is
typed twice: the models are the engine's MODELS, the verdicts and settings' values the
package's enums, the settings the engine's DEFAULTS, each with its docstring.

    python3 -I -B tools/pyapi.py PYDIR OUT.json"""
import inspect
import json
import os
import sys


def doc(obj):
    return inspect.cleandoc(obj.__doc__) if obj.__doc__ else ""


def members(cls):
    out = []
    for name, v in inspect.getmembers(cls):
        if name.startswith("_"):
            continue
        if isinstance(v, property):
            out.append({"name": name, "kind": "property", "doc": doc(v) if v.__doc__ and
                        not v.fget.__name__ == "<lambda>" else ""})
        elif inspect.isfunction(v):
            try:
                sig = str(inspect.signature(v)).replace("(self, ", "(").replace("(self)", "()")
            except (TypeError, ValueError):
                sig = "(...)"
            out.append({"name": name, "kind": "method", "signature": sig, "doc": doc(v)})
    return out


def main(argv):
    pydir, out = argv
    sys.path.insert(0, pydir)
    import fgex
    import fgex.engine as engine
    from fgex.actions import Action, ExceptionAction, FullStreamAction

    names = []
    # the models: what the package exports that the engine can hand a filter (an alias, as
    # TCPClientStream, under its own name)
    for n in fgex.__all__:
        m = getattr(fgex, n)
        if inspect.isclass(m) and m in engine.MODELS:
            names.append({"name": n, "kind": "model", "doc": doc(m), "members": members(m)})
    # the verdicts a filter returns, as the package exports them
    for n in ("ACCEPT", "DROP", "REJECT", "UNSTABLE_MANGLE"):
        a = getattr(fgex, n)
        names.append({"name": n, "kind": "verdict",
                      "doc": "%s: %s.%s = %d" % (n, type(a).__name__, a.name, a.value)})
    for e in (Action, ExceptionAction, FullStreamAction):
        names.append({"name": e.__name__, "kind": "enum", "doc": doc(e) if e.__doc__ and
                      e.__doc__ != "An enumeration." else "",
                      "members": [{"name": x.name, "kind": "value", "doc": "%s.%s = %d" %
                                   (e.__name__, x.name, x.value)} for x in e]})
    for k, v in engine.DEFAULTS.items():
        shown = "%s.%s" % (type(v).__name__, v.name) if hasattr(v, "name") else repr(v)
        names.append({"name": k, "kind": "setting",
                      "doc": "a module-level setting of the file; default %s" % shown})
    names.append({"name": "pyfilter", "kind": "decorator", "doc": doc(fgex.pyfilter)})
    # where a filter file imports them from
    mods = ["fgex", "firegex.nfproxy", "firegex.nfproxy.models", "firegex.pyfilters",
            "firegex.pyfilters.models"]
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"modules": mods, "names": names}, f, indent=1, sort_keys=True)
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
