#!/usr/bin/python3
"""A real gRPC service and client (Debian's python3-grpcio) for test_grpc, run in the test's
namespaces. Messages are raw bytes (no .proto: generic handlers, no serializers).

  grpcutil.py serve PORT LOG      h2c service on PORT; each message it receives, a line in LOG
  grpcutil.py call TARGET METHOD KIND [--gzip] [--tls CA NAME] MSG...
                                  KIND unary, stream (server streaming), bidi, or unary2 (a
                                  unary call per MSG, one after the other on one connection);
                                  prints one JSON line: {"ok": true, "answers": [...]} or
                                  {"ok": false, "code": ...} (unary2: an answer "ERR CODE" for
                                  a call that failed)

Methods: /fgx.Test/Echo (unary: "you sent " + msg), /fgx.Test/Secret (unary), /fgx.Test/Leak
(unary: a flag in the answer), /fgx.Test/Denied (unary: PERMISSION_DENIED, trailers-only),
/fgx.Test/Chunks (three answers), /fgx.Test/Chat (bidi: an answer
to each message as it arrives). Bytes travel as latin-1 in the JSON."""
import json
import sys
import threading


def serve(port, log):
    from concurrent import futures
    import grpc

    lock = threading.Lock()

    def note(method, msg):
        with lock, open(log, "a", encoding="latin-1") as f:
            f.write("%s %s\n" % (method, msg.decode("latin-1")))

    def echo(req, ctx):
        note("Echo", req)
        return b"you sent " + req

    def secret(req, ctx):
        note("Secret", req)
        return b"the secret"

    def leak(req, ctx):
        note("Leak", req)
        return b"FLAG{grpc-leak}"

    def denied(req, ctx):
        note("Denied", req)
        # before any answer: a trailers-only response (HEADERS with the status, END_STREAM)
        ctx.abort(grpc.StatusCode.PERMISSION_DENIED, "denied " + req.decode("latin-1"))

    def chunks(req, ctx):
        note("Chunks", req)
        for i in range(3):
            yield b"chunk %d for " % i + req

    def chat(reqs, ctx):
        for req in reqs:
            note("Chat", req)
            yield b"re: " + req

    h = grpc.method_handlers_generic_handler("fgx.Test", {
        "Echo": grpc.unary_unary_rpc_method_handler(echo),
        "Secret": grpc.unary_unary_rpc_method_handler(secret),
        "Leak": grpc.unary_unary_rpc_method_handler(leak),
        "Denied": grpc.unary_unary_rpc_method_handler(denied),
        "Chunks": grpc.unary_stream_rpc_method_handler(chunks),
        "Chat": grpc.stream_stream_rpc_method_handler(chat),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), handlers=(h,))
    server.add_insecure_port("0.0.0.0:%d" % port)
    server.start()
    print(json.dumps({"event": "listening"}), flush=True)
    server.wait_for_termination()


def call(argv):
    import grpc

    target, method, kind = argv[:3]
    rest = argv[3:]
    gzip = "--gzip" in rest
    rest = [a for a in rest if a != "--gzip"]
    tls = None
    if rest[:1] == ["--tls"]:
        tls, name, rest = rest[1], rest[2], rest[3:]
    msgs = [m.encode("latin-1") for m in rest]
    comp = grpc.Compression.Gzip if gzip else grpc.Compression.NoCompression
    if tls:
        with open(tls, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        chan = grpc.secure_channel(target, creds, options=(("grpc.ssl_target_name_override",
                                                             name),), compression=comp)
    else:
        chan = grpc.insecure_channel(target, compression=comp)
    out = {"ok": True, "answers": []}
    try:
        if kind == "unary":
            out["answers"].append(chan.unary_unary(method)(msgs[0], timeout=5))
        elif kind == "unary2":
            for m in msgs:
                try:
                    out["answers"].append(chan.unary_unary(method)(m, timeout=5))
                except grpc.RpcError as e:
                    out["answers"].append(b"ERR " + str(e.code()).encode())
        elif kind == "stream":
            out["answers"] = list(chan.unary_stream(method)(msgs[0], timeout=5))
        else:
            # the next message goes only once the last one is answered: a proxy that held
            # a message back would deadlock this
            got = threading.Event()
            ans = []

            def gen():
                for m in msgs:
                    yield m
                    if not got.wait(5):
                        return
                    got.clear()

            for a in chan.stream_stream(method)(gen(), timeout=8):
                ans.append(a)
                out["answers"] = ans
                got.set()
    except grpc.RpcError as e:
        out = {"ok": False, "code": str(e.code()), "details": e.details(),
               "answers": out["answers"]}
    chan.close()
    out["answers"] = [a.decode("latin-1") for a in out["answers"]]
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]), sys.argv[3])
    elif sys.argv[1] == "call":
        call(sys.argv[2:])
    else:
        sys.exit("usage: grpcutil.py serve PORT LOG | call TARGET METHOD KIND [--gzip] MSG...")
