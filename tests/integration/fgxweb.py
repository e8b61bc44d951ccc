"""The web API tests' client (test_web_api, test_web_cmds, test_listen): webclient.py run in a test
namespace, one request or live-stream operation per call."""
import base64
import json
import os
import subprocess

import fgxit as it
from fgxit import check

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def node_modules():
    """The directory holding playwright-core: FGX_WEB_NODE, else build/web-node next to FGX_BIN."""
    d = os.environ.get("FGX_WEB_NODE")
    if not d:
        d = os.path.join(os.path.dirname(it.fgx_bin()), "web-node")
        if not os.path.isdir(d):  # a sanitizer build's bin: install-deps' default place
            d = os.path.join(ROOT, "build", "web-node")
    return os.path.join(d, "node_modules")


class Web:
    """webclient.py in a namespace: one request or stream operation per call."""

    def __init__(self, env, ns, host, port):
        self.p = subprocess.Popen(["ip", "netns", "exec", ns, it.PY,
                                   os.path.join(HERE, "webclient.py"), host, str(port)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        env.helpers.append(self)
        check(json.loads(self.p.stdout.readline()).get("ready"), "webclient did not start")

    def op(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        check(line, "webclient died")
        return json.loads(line)

    def req(self, method, path, body=None, headers=None, cookie=None, csrf=None, **kw):
        h = dict(headers or {})
        if cookie:
            h["Cookie"] = "fgex_session=" + cookie
        if csrf:
            h["X-CSRF-Token"] = csrf
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        r = self.op(op="req", method=method, path=path, headers=h,
                    body_b64=base64.b64encode(data).decode() if data is not None else None,
                    **kw)
        if "body_b64" in r:
            r["body"] = base64.b64decode(r["body_b64"])
            r["hdr"] = {k.lower(): v for k, v in r["headers"]}
            r["hdrs"] = r["headers"]
            try:
                r["json"] = json.loads(r["body"])
            except ValueError:
                r["json"] = None
        return r

    def stop(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        self.p.kill()
        self.p.wait()


def expect(r, status, what):
    check(r.get("status") == status, "%s: status %r, expected %d (%s)", what, r.get("status"),
          status, r.get("error") or r.get("body", b"")[:300])
    return r
