# test_h2: one filter file written for HTTP/1.1 (Firegex's API), shown HTTP/1.1, h2 over TLS and
# h2c alike: the request's url, a header and the body, and the answer's body.
from firegex.nfproxy import pyfilter, REJECT
from firegex.nfproxy.models import HttpRequest, HttpFullResponse


@pyfilter
def no_evil(req: HttpRequest):
    if req.url and "evil1337" in req.url:
        return REJECT
    if req.get_header("X-Pwn") == "evil1337":
        return REJECT
    if req.body and b"q=evil1337" in req.body:
        return REJECT


@pyfilter
def no_flag(resp: HttpFullResponse):
    if resp.body and b"FLAG{" in resp.body:
        return REJECT
