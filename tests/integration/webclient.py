#!/usr/bin/python3
"""An HTTPS client for test_web_api, run inside a test namespace (ip netns exec NS python3
webclient.py): one JSON command a line on stdin, one JSON answer a line on stdout. python's own
ssl and http.client: TLS for real, the server's certificate returned for the test to pin.

  {"op": "req", "method", "path", "headers": {}, "body_b64", "source", "tls": true}
     -> {"status", "headers": [[k, v]...], "body_b64", "cert_sha256"} or {"error"}
  {"op": "live_open", "id", "headers": {}}   an /api/live stream read by a thread
     -> {"status", "headers"} or {"error"}
  {"op": "live_events", "id"} -> {"events": [{"event", "data", "id"}...], "comments", "closed"}
  {"op": "live_close", "id"} -> {}
  {"op": "hello", "source", "timeout"}  a plain TCP connection that sends a TLS ClientHello
     (python's own, through a memory BIO) and reads the first answer
     -> {"connected", "received_b64", "end": "data"/"eof"/"reset"/"timeout"} or {"error"}
"""
import base64
import hashlib
import http.client
import json
import socket
import ssl
import sys
import threading

HOST = None
PORT = None
LIVE = {}


def ctx():
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    # the test pins the fingerprint itself (cert_sha256), as fgexctl does
    c.check_hostname = False
    c.verify_mode = ssl.CERT_NONE
    return c


def connect(cmd):
    host = cmd.get("host", HOST)
    port = cmd.get("port", PORT)
    src = (cmd["source"], 0) if cmd.get("source") else None
    if cmd.get("tls", True):
        return http.client.HTTPSConnection(host, port, timeout=cmd.get("timeout", 10),
                                           context=ctx(), source_address=src)
    return http.client.HTTPConnection(host, port, timeout=cmd.get("timeout", 10),
                                      source_address=src)


def do_req(cmd):
    conn = connect(cmd)
    body = base64.b64decode(cmd["body_b64"]) if cmd.get("body_b64") else None
    try:
        conn.request(cmd.get("method", "GET"), cmd["path"], body=body,
                     headers=cmd.get("headers", {}))
        r = conn.getresponse()
        data = r.read()
        cert = None
        if cmd.get("tls", True) and conn.sock is not None:
            der = conn.sock.getpeercert(binary_form=True)
            cert = hashlib.sha256(der).hexdigest() if der else None
        return {"status": r.status, "headers": r.getheaders(),
                "body_b64": base64.b64encode(data).decode(), "cert_sha256": cert}
    except (OSError, http.client.HTTPException, ssl.SSLError) as e:
        return {"error": "%s: %s" % (type(e).__name__, e)}
    finally:
        conn.close()


def client_hello():
    """The first flight python's TLS client sends: a real ClientHello record."""
    out = ssl.MemoryBIO()
    obj = ctx().wrap_bio(ssl.MemoryBIO(), out)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def do_hello(cmd):
    s = socket.socket(socket.AF_INET6 if ":" in cmd.get("host", HOST) else socket.AF_INET)
    s.settimeout(cmd.get("timeout", 3))
    got = b""
    res = {"connected": False}
    try:
        if cmd.get("source"):
            s.bind((cmd["source"], 0))
        s.connect((cmd.get("host", HOST), cmd.get("port", PORT)))
        res["connected"] = True
        s.sendall(client_hello())
        # the first answer tells: bytes (a ServerHello), or the end of the connection
        chunk = s.recv(65536)
        got += chunk
        res["end"] = "data" if chunk else "eof"
    except socket.timeout:
        res["end"] = "timeout"
    except (ConnectionResetError, BrokenPipeError):
        res["end"] = "reset"
    except OSError as e:
        res["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        s.close()
    res["received_b64"] = base64.b64encode(got).decode()
    return res


def live_reader(st):
    r = st["resp"]
    ev = {}
    try:
        while True:
            line = r.readline()
            if not line:
                break
            line = line.decode().rstrip("\r\n")
            if line == "":
                if ev:
                    with st["lock"]:
                        st["events"].append(ev)
                ev = {}
            elif line.startswith(":"):
                with st["lock"]:
                    st["comments"] += 1
            else:
                k, _, v = line.partition(":")
                v = v[1:] if v.startswith(" ") else v
                ev[k] = ev[k] + "\n" + v if k in ev and k == "data" else v
    except Exception:  # noqa: BLE001 - closed under the reader (live_close): the stream ended
        pass
    with st["lock"]:
        st["closed"] = True


def live_open(cmd):
    conn = connect(dict(cmd, timeout=120))
    try:
        conn.request("GET", cmd.get("path", "/api/live"), headers=cmd.get("headers", {}))
        r = conn.getresponse()
    except (OSError, http.client.HTTPException, ssl.SSLError) as e:
        return {"error": "%s: %s" % (type(e).__name__, e)}
    out = {"status": r.status, "headers": r.getheaders()}
    if r.status != 200:
        r.read()
        conn.close()
        return out
    st = {"conn": conn, "resp": r, "events": [], "comments": 0, "closed": False,
          "lock": threading.Lock()}
    st["thread"] = threading.Thread(target=live_reader, args=(st,), daemon=True)
    st["thread"].start()
    LIVE[cmd["id"]] = st
    return out


def live_events(cmd):
    st = LIVE[cmd["id"]]
    with st["lock"]:
        return {"events": list(st["events"]), "comments": st["comments"],
                "closed": st["closed"]}


def live_close(cmd):
    st = LIVE.pop(cmd["id"], None)
    if st:
        try:
            st["conn"].sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        st["conn"].close()
    return {}


def main():
    global HOST, PORT
    HOST, PORT = sys.argv[1], int(sys.argv[2])
    ops = {"req": do_req, "live_open": live_open, "live_events": live_events,
           "live_close": live_close, "hello": do_hello}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            out = ops[cmd["op"]](cmd)
        except Exception as e:  # noqa: BLE001 - the test reads the reason
            out = {"error": "%s: %s" % (type(e).__name__, e)}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
