#!/usr/bin/env bash
# `make deb`: builds BUILD/fgex_VERSION_ARCH.deb with dpkg-buildpackage from debian/, in a copy of
# the tree (BUILD/deb/fgex-VERSION, so that dpkg-buildpackage's output, written beside the tree,
# stays under BUILD), then runs lintian on it. debian/changelog is written there from VERSION
# (the Makefile's FGX_VERSION): the version has one place, and the repository no changelog.
#   deploy/build-deb.sh BUILD VERSION
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$1 version=$2
case $build in /*) ;; *) build=$src/$build ;; esac
arch=$(dpkg --print-architecture)
work=$build/deb
tree=$work/fgex-$version

rm -rf "$work"
mkdir -p "$tree"
# the tracked files (or, in a tree without git, everything but build/)
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$src" && git ls-files -z | tar --null -T - -cf -) | tar -xf - -C "$tree"
else
  (cd "$src" && tar --exclude=./build -cf - .) | tar -xf - -C "$tree"
fi
# the date of the newest commit (or of VERSION): the same tree gives the same package
when=$(git -C "$src" log -1 --format=%cD 2>/dev/null || date -R -r "$src/VERSION")
maint=$(sed -n 's/^Maintainer: //p' "$tree/debian/control")
cat >"$tree/debian/changelog" <<CHANGES
fgex ($version) unstable; urgency=medium

  * fgex $version, built by make deb (the version from git describe or VERSION).

 -- $maint  $when
CHANGES

echo "  DEB     $build/fgex_${version}_$arch.deb"
jobs=$(nproc 2>/dev/null || echo 1)
(cd "$tree" && dpkg-buildpackage -b -uc -us --no-sign -J"$jobs" >"$work/build.log" 2>&1) || {
  tail -40 "$work/build.log" >&2
  echo "build-deb: dpkg-buildpackage failed, see $work/build.log" >&2
  exit 1
}
mv "$work/fgex_${version}_$arch.deb" "$build/"
echo "  LINTIAN $build/fgex_${version}_$arch.deb"
lintian --info --display-info "$build/fgex_${version}_$arch.deb" | tee "$work/lintian.txt"
