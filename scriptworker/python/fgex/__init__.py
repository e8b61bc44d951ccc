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
    GrpcMessage,
    GrpcRequest,
    GrpcResponse,
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
# Returned after assigning packet.l4_data: the chunk goes on edited (the proxy layer; the
# NFQUEUE layer gives it the service's fail policy, said in the script log)
UNSTABLE_MANGLE = Action.MANGLE

# The names of the functions decorated by @pyfilter while a file runs, in definition order. The
# engine empties it before it runs a file's module code and reads it afterwards.
_registry = []


def pyfilter(func):
    """Marks a function as a filter of the file, and returns the function itself (as Firegex
    5.0.0 does: no wrapper frame in a traceback)."""
    _registry.append(func.__name__)
    func.__fgex_pyfilter__ = True
    return func


def collect_pyfilters(namespace):
    """The names of the filters a module's globals define, in the order the file defines
    them (Firegex 5.0.0's collect_pyfilters)."""
    return [n for n, v in namespace.items()
            if callable(v) and getattr(v, "__fgex_pyfilter__", False)]


def get_pyfilters():
    return list(dict.fromkeys(_registry))


def clear_pyfilter_registry():
    del _registry[:]


__all__ = [
    "ACCEPT", "DROP", "REJECT", "UNSTABLE_MANGLE",
    "Action", "FullStreamAction", "ExceptionAction", "pyfilter", "collect_pyfilters",
    "RawPacket", "TCPInputStream", "TCPOutputStream", "TCPClientStream", "TCPServerStream",
    "HttpRequest", "HttpResponse", "HttpRequestHeader", "HttpResponseHeader",
    "HttpFullRequest", "HttpFullResponse", "HttpHistory", "HttpStreamHistory",
    "GrpcMessage", "GrpcRequest", "GrpcResponse",
]
