"""Loading a filter file and running it over connections.

check(source, filename) reads a file the way `fgexctl script set` needs: every refusal with
its line. Script(source) is a checked file ready to run; Conn(script) is one connection: its
own globals (the module code runs once per connection, as Firegex does), its stream and HTTP
state; Conn.feed(is_input, data) judges one chunk of bytes in stream order."""
import ast
import builtins
import copy
import inspect
import traceback
import types
import typing

import fgex
from fgex.actions import Action, ExceptionAction, FullStreamAction
from fgex.errors import NotReady, StreamVerdict
from fgex.models import MODELS, ConnCtx

DEFAULTS = {
    "FGEX_STREAM_MAX_SIZE": 1 << 20,
    "FGEX_FULL_STREAM_ACTION": FullStreamAction.FLUSH,
    "FGEX_INVALID_ENCODING_ACTION": ExceptionAction.REJECT,
    "FGEX_MAX_HISTORY_SIZE": 100,
}
HTTP_MODELS = {m for m in MODELS if m.__name__.startswith(("Http", "Grpc"))}


class ScriptError(Exception):
    """A file refused: line (0: the file as a whole) and reason."""

    def __init__(self, line, reason):
        super().__init__("line %d: %s" % (line, reason))
        self.line = line
        self.reason = reason


def _is_pyfilter(dec):
    return (isinstance(dec, ast.Name) and dec.id == "pyfilter") or (
        isinstance(dec, ast.Attribute) and dec.attr == "pyfilter")


def _static_checks(tree, warnings):
    """What can be said without running the file. Two module-level functions of one name: the
    last one wins, as in Python and in Firegex, and a warning says so. Returns the line of
    each module-level assignment to a name (settings' lines)."""
    seen = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name in seen and (any(_is_pyfilter(d) for d in node.decorator_list) or
                                      seen[node.name][1]):
                warnings.append((node.lineno, "two functions named %s (the first at line %d): "
                                 "the last one is used" % (node.name, seen[node.name][0])))
            seen[node.name] = (node.lineno, any(_is_pyfilter(d) for d in node.decorator_list))
            if isinstance(node, ast.AsyncFunctionDef) and any(
                    _is_pyfilter(d) for d in node.decorator_list):
                raise ScriptError(node.lineno, "filter %s is async: filters are plain functions"
                                  % node.name)
    assigns = {}
    for node in tree.body:
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for t in targets:
            if isinstance(t, ast.Name):
                assigns[t.id] = node.lineno
    return assigns


def _literal(node, imported=frozenset()):
    """Whether node is a literal ast.literal_eval would take (what a setting or a counter's
    start is), or a name the file imported or an attribute of one (ExceptionAction.ACCEPT:
    every run of the module code finds the same object), and whether it is a mutable one (a
    list, dict or set somewhere in it)."""
    if isinstance(node, ast.Constant):
        return True, False
    root = node
    while isinstance(root, ast.Attribute):
        root = root.value
    if isinstance(root, ast.Name) and root.id in imported:
        return True, False
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _literal(node.operand, imported)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        mut = not isinstance(node, ast.Tuple)
        for e in node.elts:
            ok, m = _literal(e, imported)
            if not ok:
                return False, False
            mut = mut or m
        return True, mut
    if isinstance(node, ast.Dict):
        for k in node.keys + node.values:
            if k is None:
                return False, False
            ok, _ = _literal(k, imported)
            if not ok:
                return False, False
        return True, True
    return False, False


def _module_plan(tree):
    """How a connection gets its own globals without running the module code again.

    Firegex runs a file's module code once per connection, so that its globals are that
    connection's. Running it costs more than the rest of a short connection's calls (an exec,
    the imports looked up, every decorator applied again). When the module code only imports,
    defines @pyfilter functions and plain functions, and assigns literals (the common file),
    running it again gives the same globals every time: they are built from the first run
    instead. Returns None (run it per connection: classes, calls, other decorators, anything
    else at module level), "shared" (nothing in the file can change its globals: no `global`
    statement and no mutable literal, so every connection may use the same ones) or a set of
    the names whose values are mutable literals (copied per connection, with every function
    rebuilt on the connection's globals)."""
    mutable, imported = set(), set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in node.names):
                return None
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)
            continue
        if isinstance(node, ast.Pass):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        if isinstance(node, ast.FunctionDef):
            if any(not _is_pyfilter(d) for d in node.decorator_list):
                return None
            a = node.args
            for d in a.defaults + [d for d in a.kw_defaults if d is not None]:
                ok, m = _literal(d, imported)
                if not ok or m:
                    return None  # a default evaluated at each run, or a shared mutable one
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is None or not all(isinstance(t, ast.Name) for t in targets):
                return None
            ok, m = _literal(node.value, imported)
            if not ok:
                return None
            if m:
                mutable.update(t.id for t in targets)
            continue
        return None
    defined = set(mutable)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets)
        elif isinstance(node, ast.AnnAssign):
            defined.add(node.target.id)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return mutable
        # f.calls = ... on one of the file's own functions (or objects): each connection's
        # run would make its own function, so the copy plan (functions rebuilt) it is
        if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(
                node.ctx, (ast.Store, ast.Del)):
            root = node
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if isinstance(root, ast.Name) and root.id in defined:
                return mutable
    return "shared" if not mutable else mutable


def _exc_line(filename, tb):
    line = 0
    for fr in traceback.extract_tb(tb):
        if fr.filename == filename:
            line = fr.lineno
    return line


def _size(v):
    """A size setting read as Firegex reads it: anything int() takes; None when it does not."""
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return None


def _settings(glob, assigns, warnings):
    """The file's settings. A bad value is not a refusal (Firegex ignores it): a warning, and
    the value Firegex would use. FGEX_STREAM_MAX_SIZE: int(v) above 0, else the default;
    FGEX_MAX_HISTORY_SIZE: max(0, int(v)), else the default; the two actions: a member of
    their enum (Action.ACCEPT/DROP/REJECT too for the encoding one, as 4.0.2 took), else the
    default."""
    s = dict(DEFAULTS)

    def bad(name, v, why):
        d = DEFAULTS[name]
        warnings.append((assigns.get(name, 0), "%s = %r: %s; %s used instead" % (
            name, v, why, getattr(d, "name", d) if not isinstance(d, int) else d)))

    for name in [k for k in glob if k.startswith("FGEX_")]:
        v = glob[name]
        if name not in DEFAULTS:
            warnings.append((assigns.get(name, 0), "unknown setting %s, ignored (known: %s)" % (
                name, ", ".join(DEFAULTS))))
            continue
        if name == "FGEX_STREAM_MAX_SIZE":
            n = _size(v)
            if n is None or n <= 0:
                bad(name, v, "not a size above 0")
                continue
            v = n
        elif name == "FGEX_MAX_HISTORY_SIZE":
            n = _size(v)
            if n is None:
                bad(name, v, "not a number")
                continue
            if n < 0:
                warnings.append((assigns.get(name, 0), "%s = %r: below 0, taken as 0 (no "
                                 "history kept), as Firegex does" % (name, v)))
                n = 0
            v = n
        elif name == "FGEX_FULL_STREAM_ACTION":
            if not isinstance(v, FullStreamAction):
                bad(name, v, "not a FullStreamAction (FLUSH, ACCEPT, REJECT, DROP)")
                continue
        elif name == "FGEX_INVALID_ENCODING_ACTION":
            if not isinstance(v, ExceptionAction) and v not in (Action.ACCEPT, Action.DROP,
                                                                Action.REJECT):
                bad(name, v, "not an ExceptionAction (ACCEPT, DROP, REJECT, NOACTION)")
                continue
        s[name] = v
    return s


def _run_module(code, filename):
    glob = {"__name__": "__fgex_script__", "__file__": filename, "__builtins__": builtins}
    fgex.clear_pyfilter_registry()
    exec(code, glob, glob)  # noqa: S102 - running the team's own filter file is the point
    names = fgex.get_pyfilters()
    fgex.clear_pyfilter_registry()
    return glob, names


def _params(func, glob, name, line):
    try:
        hints = typing.get_type_hints(func, globalns=glob)
    except Exception as e:  # a string annotation naming nothing
        raise ScriptError(line, "filter %s: cannot resolve its annotations: %s" % (name, e))
    params = []
    for pname, p in inspect.signature(func).parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ScriptError(line, "filter %s: *%s has no model: every parameter needs one "
                              "annotation" % (name, pname))
        ann = hints.get(pname, inspect.Parameter.empty)
        if ann is inspect.Parameter.empty:
            raise ScriptError(line, "filter %s: parameter %s has no annotation (use RawPacket, "
                              "TCPInputStream, HttpRequest, ...)" % (name, pname))
        if ann not in MODELS:
            raise ScriptError(line, "filter %s: parameter %s has an unknown annotation %s" % (
                name, pname, getattr(ann, "__name__", repr(ann))))
        params.append(ann)
    return params


class Script:
    """A filter file, checked. Raises ScriptError with the line of the first problem."""

    def __init__(self, source, filename="<script>", disabled=()):
        self.filename = filename
        try:
            tree = ast.parse(source, filename)
            self.code = compile(tree, filename, "exec")
        except SyntaxError as e:
            raise ScriptError(e.lineno or 0, "syntax error: %s" % e.msg) from None
        except ValueError as e:  # NUL bytes
            raise ScriptError(0, str(e)) from None
        # (line, text): what loads but is not what its author may think; logged at load
        self.warnings = []
        assigns = _static_checks(tree, self.warnings)
        plan = _module_plan(tree)
        self.lines = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self.lines[node.name] = node.lineno  # the last one of a name is the one used
        try:
            glob, names = _run_module(self.code, filename)
        except ScriptError:
            raise
        except Exception as e:
            raise ScriptError(_exc_line(filename, e.__traceback__),
                              "running the file: %s: %s" % (type(e).__name__, e)) from None
        self.settings = _settings(glob, assigns, self.warnings)
        self.functions = []  # [(name, line, [model classes])], in definition order
        for name in names:
            line = self.lines.get(name, 0)
            func = glob.get(name)
            # (a later function of the name without @pyfilter is still the one called, as in
            # Firegex, where the registry holds names: the duplicate's warning says so)
            if not callable(func):
                raise ScriptError(line, "filter %s is not a module-level function" % name)
            self.functions.append((name, line, _params(inspect.unwrap(func), glob, name, line)))
        if not self.functions:
            raise ScriptError(0, "no @pyfilter function in the file")
        self.disabled = set(disabled)
        self.uses_http = any(m in HTTP_MODELS for _, _, ps in self.functions for m in ps)
        # the first run's globals, for connections that need not run the module code again
        self.plan = plan
        self.template = glob if plan is not None else None
        self.own_funcs = set()
        if plan is not None:
            for name, v in glob.items():
                f = inspect.unwrap(v) if callable(v) else v
                if isinstance(f, types.FunctionType) and f.__code__.co_filename == filename:
                    self.own_funcs.add(name)

    @classmethod
    def from_globals(cls, glob, names, filename="<script>"):
        """A Script over module globals someone else ran the file into (Firegex's
        internals.compile(glob)): names are the filters to run; every connection shares
        glob, as Firegex's caller gives each connection its own."""
        self = cls.__new__(cls)
        self.filename = filename
        self.code = None
        self.warnings = []
        self.lines = {}
        self.settings = _settings(glob, {}, self.warnings)
        self.functions = []
        for name in names:
            func = glob.get(name)
            if not callable(func):
                raise ScriptError(0, "filter %s not found" % name)
            code = getattr(inspect.unwrap(func), "__code__", None)
            line = code.co_firstlineno if code is not None else 0
            self.functions.append((name, line, _params(inspect.unwrap(func), glob, name, line)))
        self.disabled = set()
        self.uses_http = any(m in HTTP_MODELS for _, _, ps in self.functions for m in ps)
        self.plan = "shared"
        self.template = glob
        self.own_funcs = set()
        return self

    def globals_for_conn(self):
        """A connection's globals: as running the module code again would give them."""
        if self.plan is None:
            glob, _ = _run_module(self.code, self.filename)
            return glob
        if self.plan == "shared":
            return self.template
        glob = dict(self.template)
        for name in self.plan:
            glob[name] = copy.deepcopy(self.template[name])
        for name in self.own_funcs:
            # the function itself, not @pyfilter's wrapper (which only calls it), on these
            # globals; a literal default is immutable (_module_plan), so it is shared
            f = inspect.unwrap(self.template[name])
            g = types.FunctionType(f.__code__, glob, f.__name__, f.__defaults__, f.__closure__)
            g.__kwdefaults__ = f.__kwdefaults__
            g.__qualname__ = f.__qualname__
            g.__dict__.update(f.__dict__)
            glob[name] = g
        return glob

    def info(self):
        return [{"name": n, "line": ln, "params": [m.__name__ for m in ps]}
                for n, ln, ps in self.functions]


class Verdict:
    __slots__ = ("action", "function", "detail", "data")

    def __init__(self, action, function="", detail="", data=None):
        # "accept", "reject", "drop", "error" (an exception), or "mangle": the chunk passes
        # as data (the bytes a function gave packet.l4_data / data) instead of as it came
        self.action = action
        self.function = function
        self.detail = detail
        self.data = data

    def __repr__(self):
        return "Verdict(%s, %s)" % (self.action, self.function)


ACCEPTED = Verdict("accept")


class Conn:
    """One connection under a script. feed() returns the chunk's Verdict; once a connection
    is decided (reject, drop, or a setting that stops the filters) it stays decided."""

    def __init__(self, script, is_ipv6=False, addrs=None, l4="tcp"):
        """addrs: (client ip, client port, server ip, server port) when the worker said; l4
        "udp": a UDP flow, each chunk one datagram judged alone (a refused one closes
        nothing: the flow and its globals go on), and only RawPacket can be built."""
        self.script = script
        glob = script.globals_for_conn()
        self.glob = glob
        # the function itself where its wrapper only calls it (one call less per call)
        self.funcs = [(n, inspect.unwrap(glob[n]) if script.plan is not None else glob[n], ps)
                      for n, _, ps in script.functions if n not in script.disabled]
        self.udp = l4 == "udp"
        if self.udp:
            # a stream model (TCPInputStream, HttpRequest, ...) is never built from datagrams;
            # controld refuses such a file on a UDP service, this keeps an old one harmless
            self.funcs = [f for f in self.funcs if all(m is fgex.RawPacket for m in f[2])]
        self.ctx = ConnCtx(script.settings, is_ipv6)
        self.addrs = addrs or ("", 0, "", 0)
        self.final = None
        self.calls = 0
        self.edits = 0
        self._mangled_by = None

    def feed(self, is_input, data):
        if self.final is not None:
            return self.final
        ctx = self.ctx
        a = self.addrs
        if is_input:
            ctx.pkt = fgex.RawPacket(data, True, ctx.is_ipv6, not self.udp, a[0], a[2], a[1],
                                     a[3])
        else:
            ctx.pkt = fgex.RawPacket(data, False, ctx.is_ipv6, not self.udp, a[2], a[0], a[3],
                                     a[1])
        ctx.call_mem = {}
        cache = {}
        self._mangled_by = None
        try:
            for name, func, params in self.funcs:
                args = []
                for m in params:
                    if m not in cache:
                        try:
                            cache[m] = m._fetch(ctx)
                        except NotReady:
                            cache[m] = None
                    if cache[m] is None:
                        args = None
                        break
                    args.append(cache[m])
                if args is None:
                    continue
                v = self._call_all(name, func, args)
                if v is not None:
                    if not self.udp:
                        self.final = v
                    return v
            pkt = ctx.pkt
            by = self._mangled_by or pkt._data_by
            if by is not None and pkt._edited and pkt.l4_data != data:
                # Firegex 4.0.2: a function returned UNSTABLE_MANGLE after assigning
                # l4_data / raw_packet; 5.0.0: a function assigned data. No later function
                # refused the chunk: it goes on as the new bytes.
                self.edits += 1
                return Verdict("mangle", by, "", pkt.l4_data)
        except StreamVerdict as sv:
            if sv.action is None:
                self.final = ACCEPTED
                return ACCEPTED
            self.final = Verdict("reject" if sv.action is Action.REJECT else "drop", "", sv.why)
            return self.final
        return ACCEPTED

    def done(self):
        """True once every later chunk would be accepted without a call: a setting decided the
        connection (FGEX_FULL_STREAM_ACTION ACCEPT, FGEX_INVALID_ENCODING_ACTION NOACTION), or
        no function can be called on it any more (none enabled, or each takes an HTTP model and
        the connection's HTTP broke off). The worker may then stop sending its chunks."""
        if self.final is not None:
            return self.final.action == "accept"
        if not self.funcs:
            return True
        return bool(self.ctx.http_broken) and all(
            any(m in HTTP_MODELS for m in ps) for _, _, ps in self.funcs)

    def _call_all(self, name, func, args):
        """Calls func once per combination of the list-valued arguments (several messages in
        one chunk)."""
        combos = [[]]
        for a in args:
            vals = a if isinstance(a, list) else [a]
            combos = [c + [v] for c in combos for v in vals]
        for c in combos:
            self.calls += 1
            self.ctx.pkt._current = name
            try:
                res = func(*c)
            except (Exception, SystemExit) as e:  # exit() in a filter: its error, not ours
                # the traceback from the file's own frames: fgex's are noise to its author
                tb = e.__traceback__
                while tb is not None and tb.tb_frame.f_code.co_filename != self.script.filename:
                    tb = tb.tb_next
                return Verdict("error", name, "".join(traceback.format_exception(
                    type(e), e, tb if tb is not None else e.__traceback__)))
            if res is None or res is Action.ACCEPT:
                continue
            if res is Action.MANGLE:
                # as Firegex: the packet as the function left it, unless a later one refuses
                self._mangled_by = name
                continue
            if res is Action.REJECT:
                return Verdict("reject", name)
            if res is Action.DROP:
                return Verdict("drop", name)
            return Verdict("error", name, "filter %s returned %r: return ACCEPT, DROP, REJECT, "
                           "UNSTABLE_MANGLE or None" % (name, res))
        return None
