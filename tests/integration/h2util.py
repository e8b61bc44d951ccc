"""Helpers the HTTP/2 integration tests share (test_h2, test_h1up): nghttp, Debian's
nghttp2-client, run from the client namespace, and its frame log read."""
import re
import subprocess


def nghttp(env, urls):
    """Every URI on one connection (nghttp multiplexes them); its frame log."""
    argv = ["ip", "netns", "exec", env.cli, "nghttp", "-nv", "-t", "5"] + list(urls)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    return p.returncode, p.stdout + p.stderr


def stream_ids(out):
    """{path: stream id} of the requests in nghttp -v's frame log."""
    ids, last = {}, None
    for ln in out.splitlines():
        m = re.search(r"send HEADERS frame <.*stream_id=(\d+)>", ln)
        if m:
            last = int(m.group(1))
        m = re.match(r"\s+:path: (\S+)", ln)
        if m and last is not None:
            ids[m.group(1)] = last
    return ids
