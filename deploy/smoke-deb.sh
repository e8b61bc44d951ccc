#!/usr/bin/env bash
# The package's smoke test (check-fresh.sh deb runs it in a Debian root where the .deb was just
# installed with apt, as root): the installed controld starts from its installed configuration and
# finds its installed workers, a service and a filter block real traffic between two network
# namespaces (a client's stream that matches is cut, the server never sees its bytes, another
# stream still passes), and fgexctl and controld say the package's version. Only what the
# package pulled in is used (python3 for the client and the server). The last line says PASS.
set -euo pipefail

box=fgx-smoke-box cli=fgx-smoke-cli
tmp=$(mktemp -d /tmp/fgx-smoke-XXXXXX)
pid=
fail() {
  echo "smoke-deb: FAIL: $*" >&2
  [[ -f $tmp/controld.log ]] && tail -30 "$tmp/controld.log" >&2
  exit 1
}
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  [[ -f $tmp/server.pid ]] && kill "$(cat "$tmp/server.pid")" 2>/dev/null
  ip netns del "$box" 2>/dev/null || true
  ip netns del "$cli" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

version=$(dpkg-query -W -f='${Version}' fgex)
echo "smoke-deb: fgex $version"
[[ $(fgexctl --version) == "fgexctl $version" ]] || fail "fgexctl --version: $(fgexctl --version)"
[[ $(controld --version) == "controld $version" ]] || fail "controld --version: $(controld --version)"
getent passwd fgex >/dev/null || fail "postinst made no fgex user"
[[ -d /var/lib/fgex && $(stat -c %a /var/lib/fgex) == 700 ]] || fail "no /var/lib/fgex (0700)"
# (grep without -q reads to the end: dpkg-query never dies of SIGPIPE under pipefail)
dpkg-query -W -f='${Conffiles}\n' fgex | grep '^ /etc/fgex/controld.conf ' >/dev/null ||
  fail "/etc/fgex/controld.conf is not a conffile"
for m in fgexctl controld fgex-rules; do
  [[ -n $(man -w "$m" 2>/dev/null) ]] || fail "no man page $m"
done

# Two namespaces on a veth pair: the box (controld, the service) and a client.
ip netns add "$box"
ip netns add "$cli"
ip -n "$box" link add veth-box type veth peer name veth-cli netns "$cli"
ip -n "$box" addr add 10.99.0.1/24 dev veth-box
ip -n "$cli" addr add 10.99.0.2/24 dev veth-cli
for ns in "$box" "$cli"; do
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "veth-${ns##*-}" up
done

# The service: each line it receives is written to a file and answered with "ok:LINE".
cat >"$tmp/server.py" <<'PY'
import os, socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.99.0.1", 5000))
s.listen(16)
open(sys.argv[1] + "/server.pid", "w").write(str(os.getpid()))
def serve(c):
    try:
        with c, c.makefile("rb") as f:
            for line in f:
                with open(sys.argv[1] + "/server.got", "ab") as g:
                    g.write(line)
                c.sendall(b"ok:" + line)
    except ConnectionResetError:  # the filter's reset of a matching stream
        pass
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
PY
# The client: sends its lines on one stream; prints what came back, or how the stream ended.
cat >"$tmp/client.py" <<'PY'
import socket, sys
try:
    c = socket.create_connection(("10.99.0.1", 5000), timeout=3)
    got = b""
    for line in sys.argv[1:]:
        c.sendall(line.encode() + b"\n")
        got += c.recv(4096)
    print(got.decode(errors="replace").strip() or "closed")
except (ConnectionResetError, BrokenPipeError):
    print("reset")
except socket.timeout:
    print("timeout")
PY
ip netns exec "$box" python3 "$tmp/server.py" "$tmp" &
for _ in $(seq 50); do [[ -f $tmp/server.pid ]] && break; sleep 0.1; done

# controld as installed: /usr/sbin, the workers from /usr/lib/fgex, /etc/fgex/controld.conf,
# /var/lib/fgex; /run/fgex as the unit's RuntimeDirectory makes it.
install -d -m 0755 /run/fgex
ip netns exec "$box" controld --foreground >"$tmp/controld.log" 2>&1 &
pid=$!
up=0
for _ in $(seq 100); do
  kill -0 "$pid" 2>/dev/null || fail "controld exited"
  if fgexctl --json status 2>/dev/null | python3 -c '
import json, sys
st = json.load(sys.stdin)
sys.exit(0 if any(w.get("kind") == "nfq" and w.get("state") == "running" for w in st.get("workers", [])) else 1)'; then
    up=1
    break
  fi
  sleep 0.1
done
((up)) || fail "controld has no running nfq worker after 10 s"
echo "smoke-deb: controld $(fgexctl --json status | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])') running"

[[ $(ip netns exec "$cli" python3 "$tmp/client.py" hello) == ok:hello ]] || fail "no answer before the filter"
# (a service of an earlier run in this root's /var/lib/fgex goes first)
fgexctl service rm smoke --yes >/dev/null 2>&1 || true
fgexctl service add smoke --proto tcp --port 5000 >/dev/null
fgexctl filter add smoke 'evil[0-9]+' >/dev/null
got=$(ip netns exec "$cli" python3 "$tmp/client.py" hello evil123)
[[ $got == reset || $got == timeout || $got == ok:hello ]] || fail "the matching stream got $got"
grep -q evil "$tmp/server.got" && fail "the server received the blocked bytes"
[[ $(ip netns exec "$cli" python3 "$tmp/client.py" hello2) == ok:hello2 ]] ||
  fail "a stream that does not match did not pass"
blocked=$(fgexctl --json service list | python3 -c '
import json, sys
d = json.load(sys.stdin)
d = d.get("services", []) if isinstance(d, dict) else d
print(sum(s.get("blocked", 0) for s in d if s.get("name") == "smoke"))')
[[ $blocked -ge 1 ]] || fail "service list counts $blocked blocked"
echo "smoke-deb: the filter cut the matching stream ($got), $blocked blocked; another stream passed"

kill "$pid"
wait "$pid" || true
pid=
ip netns exec "$box" nft list table inet fgex >/dev/null 2>&1 && fail "controld left its nftables table"
echo "smoke-deb: PASS"
