#!/usr/bin/env bash
# `make check-fresh`: proves that fgex installs on a machine that has nothing. Builds a minimal
# Debian root with debootstrap (FRESH_SUITE, default bookworm; trixie for Debian 13) in
# build/fresh-SUITE-LEG and runs one leg in it, in a chroot:
#   deploy/check-fresh.sh source   copies the tracked files of this tree into it (/src/fgex),
#                                  installs only what the README says a fresh box needs (make,
#                                  git), and runs `make test` there (FRESH_MAKE: other targets)
#   deploy/check-fresh.sh deb FILE installs the package FILE (`make deb`, built on the host) with
#                                  apt alone, prints what it pulled in and how long it took, and
#                                  runs deploy/smoke-deb.sh there (no compiler in the root)
# Takes minutes and downloads packages: not part of CI. Needs root. The root is rebuilt on every
# run; FRESH_MIRROR overrides the Debian mirror (default: the host's own, from
# /etc/apt/sources.list or sources.list.d). The last line is the leg's.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
suite=${FRESH_SUITE:-bookworm}
leg=${1:-source}

die() {
  echo "check-fresh: $*" >&2
  exit 1
}

# ---- inside a private mount namespace: mount, run, unmount -----------------------------------
# Everything is mounted in a mount namespace of this script's own, so the mounts vanish with it
# even if the script is killed; the trap unmounts them on any exit as well.
# The legs, run in the chroot by bash -c (no variable of this script reaches them).
leg_source() {
  set -e
  export DEBIAN_FRONTEND=noninteractive
  echo "== check-fresh: apt-get install make git"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends make git >/dev/null
  cd /src/fgex
  echo "== check-fresh: make $FRESH_MAKE"
  # shellcheck disable=SC2086 # FRESH_MAKE is a list of targets
  make $FRESH_MAKE
}

# The package as a vulnbox gets it: apt alone, with the recommends apt installs by default.
leg_deb() {
  set -e
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  dpkg-query -W -f='${Package}\n' | sort >/tmp/pkgs.before
  echo "== check-fresh: apt-get install ./$(basename /tmp/deb/*.deb)"
  t0=$(date +%s%N)
  apt-get install -y -qq /tmp/deb/*.deb >/tmp/apt.log 2>&1 || { cat /tmp/apt.log; exit 1; }
  t1=$(date +%s%N)
  cat /tmp/apt.log
  dpkg-query -W -f='${Package} ${Installed-Size}\n' | sort >/tmp/pkgs.after
  echo "== check-fresh: packages apt pulled in (installed size, KiB)"
  join -v 1 /tmp/pkgs.after /tmp/pkgs.before | sort -k2,2nr | tee /tmp/pkgs.new |
    awk '{ printf "  %-32s %8d\n", $1, $2; n++; t += $2 } END { printf "  %d packages, %d KiB\n", n, t }'
  echo "== check-fresh: the install took $(((t1 - t0) / 1000000)) ms"
  for c in cc gcc clang make; do
    if command -v "$c" >/dev/null; then
      echo "check-fresh: the package pulled in a build tool: $c" >&2
      exit 1
    fi
  done
  echo "== check-fresh: smoke test"
  bash /tmp/deb/smoke-deb.sh
}

if [[ ${1:-} == --chroot ]]; then
  root=$2 leg=$3 fresh_make=$4
  mounted=()
  cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
      umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || true
    done
  }
  trap cleanup EXIT
  mnt() { # mount ARGS... TARGET
    mount "$@"
    mounted+=("${!#}")
  }
  # The root a mount point of its own: `ip -n`/`ip netns exec` remount / as a slave.
  mnt --bind "$root" "$root"
  mnt -t proc proc "$root/proc"
  mnt -t sysfs sysfs "$root/sys"
  # the cgroup2 tree a booted box has (test_unit_systemd runs a systemd --user manager)
  mnt -t cgroup2 cgroup2 "$root/sys/fs/cgroup"
  mnt --bind /dev "$root/dev"
  mnt --bind /dev/pts "$root/dev/pts"
  # A /run of its own: `ip netns` keeps its namespaces in /run/netns, and the host's /run would
  # let package scripts in the chroot talk to the host's systemd.
  mnt -t tmpfs -o mode=0755 tmpfs "$root/run"
  rc=0
  chroot "$root" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin FRESH_MAKE="$fresh_make" \
    /bin/bash -c "$(declare -f "leg_$leg"); leg_$leg" || rc=$?
  exit "$rc"
fi

# ---- outside: build the root ------------------------------------------------------------------
case $leg in
source) ;;
deb)
  deb=${2:-}
  [[ -f $deb ]] || die "usage: check-fresh.sh deb FILE.deb (make deb builds it)"
  deb=$(cd "$(dirname "$deb")" && pwd)/$(basename "$deb")
  ;;
*) die "usage: check-fresh.sh [source | deb FILE.deb]" ;;
esac
root=${FRESH_ROOT:-$src/build/fresh-$suite-$leg}
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot, mounts)"
command -v git >/dev/null || die "needs git to list the tracked files"

# The host's Debian mirror: the first source of the suite (or else of bookworm: the same mirror
# carries trixie), one-line or deb822 format.
host_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    awk -v s="$suite" '$1 == "deb" && $0 ~ (" " s " ") {
        for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { print $i; exit } }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk -v s="$suite" '
      /^[ \t]*$/ { if (uri != "" && ok) { print uri; done = 1; exit } uri = ""; ok = 0; next }
      tolower($1) == "uris:" { uri = $2 }
      tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == s) ok = 1 }
      END { if (!done && uri != "" && ok) print uri }' "$f"
  done
}
# sed -n 1p, not head: it reads to the end, so the writer never dies of SIGPIPE under pipefail
mirror=${FRESH_MIRROR:-$(host_mirror | sed -n 1p)}
[[ -n $mirror || $suite == bookworm ]] || mirror=$(suite=bookworm host_mirror | sed -n 1p)
[[ -n $mirror ]] || die "no $suite mirror in /etc/apt/sources.list*: set FRESH_MIRROR"

if ! command -v debootstrap >/dev/null; then
  echo "== check-fresh: installing debootstrap on this host"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap \
    >/dev/null
fi

# Never delete a root something is still mounted in (its /dev would be the host's).
# (grep without -q reads to the end: findmnt never dies of SIGPIPE under pipefail)
if findmnt -rn -o TARGET | grep "^$root/" >/dev/null; then
  die "something is still mounted under $root: unmount it first"
fi
rm -rf "$root"
mkdir -p "$root"
echo "== check-fresh: debootstrap --variant=minbase $suite $root $mirror"
# In a mount namespace of its own too: debootstrap mounts /proc in the root while it installs,
# and a mount it leaves behind must not outlive it on the host.
unshare --mount --propagation private \
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
  die "debootstrap failed, see $root.debootstrap.log"

if [[ $leg == source ]]; then
  echo "== check-fresh: copying the tracked files to /src/fgex"
  mkdir -p "$root/src/fgex"
  (cd "$src" && git ls-files -z | tar --null -T - -cf -) | tar -xf - -C "$root/src/fgex"
else
  # only the package and the smoke test: nothing of the source tree
  mkdir -p "$root/tmp/deb"
  cp "$deb" "$src/deploy/smoke-deb.sh" "$root/tmp/deb/"
fi
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
# The host's network, as resolv.conf is: the CAs its administrator added (a TLS proxy between
# this host and the registries, as on the build machines), which ca-certificates takes into the
# root's store when make test installs it. Nothing else of the host's.
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -L /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
# As in any chroot: package scripts must not start services.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"

exec unshare --mount --propagation private "$0" --chroot "$root" "$leg" "${FRESH_MAKE:-test}"
