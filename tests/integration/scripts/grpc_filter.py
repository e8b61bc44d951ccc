# test_grpc: a gRPC filter file (Firegex 5.0.0's GrpcRequest / GrpcResponse, and an
# HttpRequest for the method), run on the rendered h2 streams.
from firegex.pyfilters import pyfilter, REJECT
from firegex.pyfilters.models import GrpcRequest, GrpcResponse, HttpFullResponse, HttpRequest


@pyfilter
def no_secret_method(req: HttpRequest):
    if req.url == "/fgx.Test/Secret":
        return REJECT


@pyfilter
def no_needle(msg: GrpcRequest):
    # the message without its prefix: startswith; compressed ones inflated (fgex's
    # payload_decoded), the raw payload as sent beside it
    if msg.method == "/fgx.Test/Chat" or msg.method == "/fgx.Test/Echo":
        if (msg.payload_decoded or b"").startswith(b"NOT-THIS-ONE"):
            return REJECT


@pyfilter
def no_flag(msg: GrpcResponse):
    if b"FLAG{" in msg.payload:
        return REJECT


@pyfilter
def no_denied_secret(resp: HttpFullResponse):
    # a trailers-only answer: the status is in its head
    if "denied secret" in resp.get_header("grpc-message", ""):
        return REJECT
