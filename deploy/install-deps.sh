#!/usr/bin/env bash
# Installs the Debian packages fgex needs, skipping those already present.
#   deploy/install-deps.sh [run]  build, run and install fgex (`make`, `make run`, `make install`)
#   deploy/install-deps.sh test   run's, plus what the unit and integration tests add (`make test`)
#   deploy/install-deps.sh bench  test's, plus what the benchmarks add (`make bench`)
#   deploy/install-deps.sh deb    run's, plus what building the Debian package adds (`make deb`)
#   deploy/install-deps.sh --list MODE   print the packages of MODE and stop
set -euo pipefail

# libseccomp and libcap-ng: the workers' drop of privileges (libcommon/priv.c).
# Building: the compiler, the code generator, the libraries' headers (libpcap: fgexctl capture
# writes pcap files with it), scdoc for the man pages, libmicrohttpd for controld's HTTP
# listeners (the web dashboard over HTTPS with GnuTLS, --metrics-listen), libnghttp2 for the
# proxy's HTTP service kind (HTTP/2 and h2c terminated, proxyworker/px_h2.c), libhttp-parser for
# its HTTP/1.1-only services (--upstream http1: their answers parsed, px_h2.c), zlib for the
# gRPC messages a client compressed (gzip, deflate: inflated for the filters, px_grpc.c).
# python3 with the modules fgex's Python package imports (h11, brotli, websockets): the build
# reads the script editor's names from the package itself (tools/pyapi.py).
build=(
  build-essential pkg-config
  protobuf-c-compiler libprotobuf-c-dev
  libnetfilter-queue-dev libnftnl-dev libmnl-dev
  libhyperscan-dev libevent-dev libnng-dev liblmdb-dev
  libmbedtls-dev libcrypt-dev libjansson-dev libssl-dev libpcap-dev
  libmicrohttpd-dev
  libseccomp-dev libcap-ng-dev
  libnghttp2-dev libhttp-parser-dev zlib1g-dev
  scdoc
  python3 python3-h11 python3-brotli python3-websockets
)
# Running: nft to read fgex's rules (iptables provides libxt_NFQUEUE.so, through which nft prints
# the compat NFQUEUE target, docs/architecture.md), ip for policy routing and namespaces, and
# man for the pages `make install` puts in place (the unit's Documentation= names them).
# Script filters (issue 16): Debian's python3 runs the filter files; h11 parses their HTTP/1.1,
# brotli decodes br bodies, dpkt reads the captures `fgexctl script test` runs a file over,
# websockets parses the frames (and permessage-deflate) of ws_stream.
run=(nftables iptables iproute2 man-db python3 python3-h11 python3-brotli python3-dpkt
  python3-websockets libmicrohttpd12 libseccomp2 libcap-ng0 libnghttp2-14 libhttp-parser2.9 passwd)
# Testing: Criterion, python3 with scapy for crafted packets, openssl for test_remote's
# certificates, procps, and systemd-analyze for the unit file test (with dbus-daemon, the
# session bus of the systemd user manager test_unit_systemd runs the unit in); for test_tls: curl (HTTP/1.1
# and HTTP/2 clients), nginx-light (an HTTP/2 TLS service), python3-cryptography (certificates,
# an expired one among them); for test_h2: nghttp2-client (nghttp, several streams on one
# connection) and nghttp2-server (nghttpd, an h2 and h2c service); for test_grpc: python3-grpcio
# (a real gRPC client and server); for test_h2cap: tshark (Wireshark's HTTP dissector reads an h2
# connection's pcap as HTTP/1.1 exchanges).
# The dashboard's browser tests (test_web_ui): Debian's chromium, headless, driven by
# playwright-core from npm (installed below into build/web-node, never committed) under nodejs.
# ca-certificates: the system's CA store, which npm is told to trust (below) for the download.
# The fuzzing harnesses (tests/fuzz, replayed by `make test`, run by `make fuzz`): clang with
# libFuzzer and the sanitizers' runtimes (libclang-rt-dev: the default clang's, 14 on Debian 12, 19 on 13).
# The 2-minute soak (test_soak runs bench/soak) needs nothing more: scapy for its out-of-order
# segments, python3-cryptography for its TLS certificates; its plot needs gnuplot-nox (bench).
test=(libcriterion-dev python3 python3-scapy openssl procps systemd dbus-daemon curl nginx-light
  tshark nghttp2-client nghttp2-server python3-grpcio
  python3-cryptography chromium nodejs ca-certificates clang libclang-rt-dev)
# npm: Debian's package, unless a nodejs that carries its own npm (NodeSource's) is installed
command -v npm >/dev/null 2>&1 || test+=(npm)
# Benchmarking: traffic and charts; bench/tls's nginx stream proxy (libnginx-mod-stream) and
# its profile (linux-perf); bench/h2's load client, h2load (nghttp2-client), and its nginx
# (nginx-light, as for the tests).
bench=(iperf3 gnuplot-nox libnginx-mod-stream linux-perf nghttp2-client nginx-light)
# The Debian package (`make deb`): dpkg-buildpackage and dpkg-shlibdeps (dpkg-dev), debhelper's
# dh, and lintian to check the result.
deb=(dpkg-dev debhelper lintian)

list=0
if [[ ${1:-} == --list ]]; then
  list=1
  shift
fi
mode=${1:-run}
case $mode in
run) pkgs=("${build[@]}" "${run[@]}") ;;
test) pkgs=("${build[@]}" "${run[@]}" "${test[@]}") ;;
bench) pkgs=("${build[@]}" "${run[@]}" "${test[@]}" "${bench[@]}") ;;
deb) pkgs=("${build[@]}" "${run[@]}" "${deb[@]}") ;;
*)
  echo "usage: install-deps.sh [--list] [run|test|bench|deb]" >&2
  exit 2
  ;;
esac
if ((list)); then
  printf '%s\n' "${pkgs[@]}"
  exit 0
fi

# playwright-core for test_web_ui, from tests/web's package.json and lockfile (npm ci), into
# FGX_WEB_NODE (default build/web-node): done again only when the lockfile changed.
web_node() {
  local root dir
  root=$(cd "$(dirname "$0")/.." && pwd)
  dir=${FGX_WEB_NODE:-$root/build/web-node}
  if [[ -d $dir/node_modules/playwright-core ]] && cmp -s "$root/tests/web/package-lock.json" "$dir/package-lock.json"; then
    return 0
  fi
  echo "install-deps ($mode): npm ci of tests/web into $dir"
  mkdir -p "$dir"
  cp "$root/tests/web/package.json" "$root/tests/web/package-lock.json" "$dir/"
  # node trusts only its own built-in roots; add the system's store, so that a registry reached
  # through a site's TLS proxy, whose CA the administrator installed, works as apt and curl do
  if [[ -z ${NODE_EXTRA_CA_CERTS:-} && -f /etc/ssl/certs/ca-certificates.crt ]]; then
    export NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
  fi
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
}

# Debian 13 renamed libraries in its 64-bit time_t transition (libmicrohttpd12t64, which provides
# libmicrohttpd12): the new name installed counts as the old one.
installed() {
  local st
  st=$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)
  [[ $st == "install ok installed" ]]
}
missing=()
for p in "${pkgs[@]}"; do
  installed "$p" || installed "${p}t64" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  [[ $mode == run || $mode == deb ]] || web_node
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages: ${missing[*]} (run as root to install them)" >&2
  exit 1
fi
echo "install-deps ($mode): installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
[[ $mode == run || $mode == deb ]] || web_node
