#!/usr/bin/env bash
# Installs the Debian packages fgex needs to build, run and test, skipping those already present.
set -euo pipefail
pkgs=(
  build-essential pkg-config
  protobuf-c-compiler libprotobuf-c-dev
  libnetfilter-queue-dev libnftnl-dev libmnl-dev
  libhyperscan-dev libevent-dev libnng-dev liblmdb-dev libcriterion-dev
  libmbedtls-dev libcrypt-dev
  nftables iptables iproute2 procps python3 python3-scapy iperf3 gnuplot-nox openssl
)
missing=()
for p in "${pkgs[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ $st == "install ok installed" ]] || missing+=("$p")
done
((${#missing[@]})) || exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages: ${missing[*]} (run as root to install them)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
