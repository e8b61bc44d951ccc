#!/usr/bin/env bash
# `make check-fresh`: proves that the two commands work on a machine that has nothing. Builds a
# minimal Debian 12 root with debootstrap in build/fresh-root, copies the tracked files of this
# tree into it (/src/fgex), installs only what the README says a fresh box needs (make, git), and
# runs `make test` inside it in a chroot. Takes minutes and downloads packages: not part of CI.
# Needs root. The root is rebuilt on every run; FRESH_MIRROR overrides the Debian mirror (default:
# the host's own, from /etc/apt/sources.list or sources.list.d). The last line is make test's.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
root=${FRESH_ROOT:-$src/build/fresh-root}
suite=bookworm

die() {
  echo "check-fresh: $*" >&2
  exit 1
}

# ---- inside a private mount namespace: mount, run, unmount -----------------------------------
# Everything is mounted in a mount namespace of this script's own, so the mounts vanish with it
# even if the script is killed; the trap unmounts them on any exit as well.
if [[ ${1:-} == --chroot ]]; then
  root=$2
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
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c '
      set -e
      export DEBIAN_FRONTEND=noninteractive
      echo "== check-fresh: apt-get install make git"
      apt-get update -qq
      apt-get install -y -qq --no-install-recommends make git >/dev/null
      cd /src/fgex
      echo "== check-fresh: make test"
      make test' || rc=$?
  exit "$rc"
fi

# ---- outside: build the root ------------------------------------------------------------------
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot, mounts)"
command -v git >/dev/null || die "needs git to list the tracked files"

# The host's Debian mirror: the first bookworm source, one-line or deb822 format.
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

echo "== check-fresh: copying the tracked files to /src/fgex"
mkdir -p "$root/src/fgex"
(cd "$src" && git ls-files -z | tar --null -T - -cf -) | tar -xf - -C "$root/src/fgex"
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

exec unshare --mount --propagation private "$0" --chroot "$root"
