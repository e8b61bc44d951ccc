#!/usr/bin/python3
"""TLS helpers for test_tls.py, run inside the test's namespaces (Python's own ssl module, i.e.
OpenSSL). One JSON object per line on stdout.

  fgxtls.py certs DIR
      Write a CA-less set of self-signed certificates and keys into DIR (ECDSA P-256): proxy
      (CN fgex-proxy), service (CN service), expired (CN expired, ended yesterday).
  fgxtls.py server --host H --port P --cert C --key K [--alpn h2,http/1.1]
      A TLS server. Per connection: {"event":"tls","id","peer","sni","alpn","version"} after the
      handshake, {"event":"data","id","data"(b64)} per read, then {"event":"end","id","data"(all
      bytes, b64),"how":"eof"|"reset"|"error"}. It answers b"PING" with b"PONG\\n" and b"LEAK"
      with b"FLAG{leaked-secret}\\n".
  fgxtls.py client --host H --port P [--sni NAME] [--alpn LIST] [--tls 1.2|1.3]
                   [--chunks JSON] [--pause S] [--plain] [--timeout S] [--sport PORT]
      Connect, handshake (not with --plain), send each hex chunk of JSON as its own TLS record
      (its own write), pausing between them, shut the write side, read until the end. Prints
      {"event":"result","ok","version","alpn","received"(b64),"how","error"}.
"""
import argparse
import base64
import datetime
import json
import os
import socket
import ssl
import sys
import threading
import time


def emit(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def b64(b):
    return base64.b64encode(b).decode()


def cmd_certs(a):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    for name, start, end in (("proxy", now - datetime.timedelta(days=1),
                              now + datetime.timedelta(days=365)),
                             ("service", now - datetime.timedelta(days=1),
                              now + datetime.timedelta(days=365)),
                             ("expired", now - datetime.timedelta(days=30),
                              now - datetime.timedelta(days=1))):
        key = ec.generate_private_key(ec.SECP256R1())
        subj = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                             "fgex-proxy" if name == "proxy" else name)])
        cert = (x509.CertificateBuilder().subject_name(subj).issuer_name(subj)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.SubjectAlternativeName([x509.DNSName("svc.test")]), False)
                .sign(key, hashes.SHA256()))
        with open(os.path.join(a.dir, name + ".pem"), "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
        with open(os.path.join(a.dir, name + ".key"), "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    emit(event="certs", dir=a.dir)


def serve_one(ctx, sock, peer, cid):
    ctx_local = ctx
    data = b""
    how = "eof"
    try:
        s = ctx_local.wrap_socket(sock, server_side=True)
    except (ssl.SSLError, OSError) as e:
        emit(event="end", id=cid, data="", how="handshake", error=str(e))
        return
    emit(event="tls", id=cid, peer=peer[0], sni=getattr(s, "fgx_sni", None), alpn=s.selected_alpn_protocol(),
         version=s.version())
    try:
        while True:
            d = s.recv(65536)
            if not d:
                # Python's ssl reads a reset as an end too: the TCP state tells them apart
                # (CLOSE after a RST, CLOSE_WAIT after a FIN).
                st = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
                how = "reset" if st == 7 else "eof"
                break
            data += d
            emit(event="data", id=cid, data=b64(d))
            if b"PING" in d:
                s.sendall(b"PONG\n")
            if b"LEAK" in d:
                s.sendall(b"FLAG{leaked-secret}\n")
            if b"CLOSE" in d:
                break
    except ConnectionResetError:
        how = "reset"
    except (ssl.SSLError, OSError) as e:
        how = "error:" + str(e)
    emit(event="end", id=cid, data=b64(data), how=how)
    try:
        s.close()
    except OSError:
        pass


def cmd_server(a):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(a.cert, a.key)
    if a.alpn:
        ctx.set_alpn_protocols(a.alpn.split(","))

    def on_sni(sock, name, c):
        sock.fgx_sni = name
    ctx.sni_callback = on_sni
    fam = socket.AF_INET6 if ":" in a.host else socket.AF_INET
    ls = socket.socket(fam, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((a.host, a.port))
    ls.listen(64)
    emit(event="listening", port=a.port)
    cid = 0
    while True:
        sock, peer = ls.accept()
        cid += 1
        emit(event="accept", id=cid, peer=peer[0])
        threading.Thread(target=serve_one, args=(ctx, sock, peer, cid), daemon=True).start()


def cmd_client(a):
    res = {"event": "result", "ok": False, "version": None, "alpn": None, "received": "",
           "how": None, "error": None}
    got = b""
    try:
        if a.sport:
            # this very source port; SO_REUSEADDR: one this namespace left in TIME_WAIT too
            raw = socket.socket(socket.AF_INET6 if ":" in a.host else socket.AF_INET)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            raw.bind(("", a.sport))
            raw.settimeout(a.timeout)
            raw.connect((a.host, a.port))
        else:
            raw = socket.create_connection((a.host, a.port), timeout=a.timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if a.plain:
            s = raw
        else:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            if a.tls == "1.2":
                ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_2
            elif a.tls == "1.3":
                ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
            if a.alpn:
                ctx.set_alpn_protocols(a.alpn.split(","))
            s = ctx.wrap_socket(raw, server_hostname=a.sni or None)
            res["version"] = s.version()
            res["alpn"] = s.selected_alpn_protocol()
            der = s.getpeercert(binary_form=True)
            res["peer_cert_b64"] = b64(der) if der else ""
        for i, ch in enumerate(json.loads(a.chunks)):
            if i:
                time.sleep(a.pause)
            s.sendall(bytes.fromhex(ch))
        # TLS has no half-close in Python's ssl: a TLS client reads until --until or the end.
        if a.plain and not a.hold:
            s.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + a.timeout
        s.settimeout(a.timeout)
        while time.monotonic() < deadline:
            d = s.recv(65536)
            if not d:
                res["how"] = "eof"
                break
            got += d
            if a.until and a.until.encode() in got:
                res["how"] = "until"
                break
        res["ok"] = True
    except ConnectionResetError as e:
        res["how"] = "reset"
        res["error"] = str(e)
    except ssl.SSLError as e:
        res["how"] = "ssl"
        res["error"] = str(e)
    except socket.timeout as e:
        res["how"] = "timeout"
        res["error"] = str(e)
        res["ok"] = bool(got)
    except OSError as e:
        res["how"] = "error"
        res["error"] = str(e)
    res["received"] = b64(got)
    emit(**res)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("certs")
    c.add_argument("dir")
    s = sub.add_parser("server")
    s.add_argument("--host", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--cert", required=True)
    s.add_argument("--key", required=True)
    s.add_argument("--alpn", default="")
    k = sub.add_parser("client")
    k.add_argument("--host", required=True)
    k.add_argument("--port", type=int, required=True)
    k.add_argument("--sni", default="")
    k.add_argument("--alpn", default="")
    k.add_argument("--tls", default="")
    k.add_argument("--chunks", default="[]")
    k.add_argument("--pause", type=float, default=0.2)
    k.add_argument("--plain", action="store_true")
    k.add_argument("--hold", action="store_true", help="--plain: never shut the write side")
    k.add_argument("--until", default="")
    k.add_argument("--timeout", type=float, default=3.0)
    k.add_argument("--sport", type=int, default=0, help="bind this source port first")
    a = p.parse_args()
    {"certs": cmd_certs, "server": cmd_server, "client": cmd_client}[a.cmd](a)


if __name__ == "__main__":
    main()
