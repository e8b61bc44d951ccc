# test_h2edit: a filter file that edits the HTTP/1.1 rendering of h2 streams (RawPacket chunks,
# Firegex 4.0.2's UNSTABLE_MANGLE) and drops one request (DROP), as it would on HTTP/1.1.
from firegex.nfproxy import pyfilter, DROP, UNSTABLE_MANGLE
from firegex.nfproxy.models import HttpRequest, RawPacket

EDITS_IN = ((b"/orig-path", b"/edited/longer-path"),
            (b"GET /bad-edit HTTP/1.1\r\n", b"no request line\r\n"),  # not HTTP/1.1: fail policy
            (b"X-Tag: orig\r\n", b"X-Tag: edited-tag\r\n"),
            (b"q=orig", b"q=EDITED-and-longer"))
EDITS_OUT = ((b"answer to be edited", b"an answer the filter file edited, longer"),)


@pyfilter
def drop_me(req: HttpRequest):
    if req.url and "/drop-me" in req.url:
        return DROP


@pyfilter
def edit(pkt: RawPacket):
    d = pkt.l4_data
    n = d
    for old, new in EDITS_IN if pkt.is_input else EDITS_OUT:
        n = n.replace(old, new)
    if n != d:
        pkt.l4_data = n
        return UNSTABLE_MANGLE
