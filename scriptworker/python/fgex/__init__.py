"""fgex script filters: the API of Firegex's Python filters (nfproxy / pyfilters), fgex's own
implementation. A filter file imports this module as `fgex`, `firegex.nfproxy` or
`firegex.pyfilters`; the same names are found under each.

    from firegex.nfproxy import pyfilter, ACCEPT, REJECT, DROP
    from firegex.nfproxy.models import HttpRequest

    @pyfilter
    def no_export(req: HttpRequest):
        if req.url and req.url.startswith("/api/export"):
            return REJECT
"""
import functools

from fgex.actions import Action, ExceptionAction, FullStreamAction
from fgex.models import (
    HttpFullRequest,
    HttpFullResponse,
    HttpHistory,
    HttpRequest,
    HttpRequestHeader,
    HttpResponse,
    HttpResponseHeader,
    HttpStreamHistory,
    RawPacket,
    TCPClientStream,
    TCPInputStream,
    TCPOutputStream,
    TCPServerStream,
)

ACCEPT = Action.ACCEPT
DROP = Action.DROP
REJECT = Action.REJECT
# Packet mangling is not supported by fgex: a file that uses this name is refused when set.
UNSTABLE_MANGLE = Action.MANGLE

# The names of the functions decorated by @pyfilter while a file runs, in definition order. The
# engine empties it before it runs a file's module code and reads it afterwards.
_registry = []


def pyfilter(func):
    """Marks a function as a filter of the file."""
    _registry.append(func.__name__)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    wrapper.__fgex_pyfilter__ = True
    return wrapper


def get_pyfilters():
    return list(dict.fromkeys(_registry))


def clear_pyfilter_registry():
    del _registry[:]


__all__ = [
    "ACCEPT", "DROP", "REJECT", "UNSTABLE_MANGLE",
    "Action", "FullStreamAction", "ExceptionAction", "pyfilter",
    "RawPacket", "TCPInputStream", "TCPOutputStream", "TCPClientStream", "TCPServerStream",
    "HttpRequest", "HttpResponse", "HttpRequestHeader", "HttpResponseHeader",
    "HttpFullRequest", "HttpFullResponse", "HttpHistory", "HttpStreamHistory",
]
