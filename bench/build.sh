#!/bin/sh
# Build the benchmark's C helpers into $BUILD/bin (default build/bench/bin), against the top-level
# build's libcommon.a (made here with `make BUILD=$BUILD`, never touching another build dir).
#   bench/build.sh            build all of them
#   bench/build.sh connload   build one
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/bench}
CC=${CC:-cc}
WARN="-Wall -Wextra -Werror -Wshadow -Wformat=2 -Wstrict-prototypes"
CFLAGS="-std=c11 -D_GNU_SOURCE -O2 -g $WARN -pthread"
HS_CFLAGS=$(pkg-config --cflags libhs 2>/dev/null || echo -I/usr/include/hs)
mkdir -p "$BUILD/bin"

build_one() {
    case "$1" in
    connload)
        $CC $CFLAGS -o "$BUILD/bin/connload" bench/connload.c
        ;;
    udpflood)
        $CC $CFLAGS -o "$BUILD/bin/udpflood" bench/udpflood.c
        ;;
    tlsload)
        $CC $CFLAGS -o "$BUILD/bin/tlsload" bench/tlsload.c -lssl -lcrypto
        ;;
    scan)
        make --no-print-directory -s BUILD="$BUILD" "$BUILD/libcommon.a"
        $CC $CFLAGS $HS_CFLAGS -Ilibcommon/include -o "$BUILD/bin/scan" bench/scan.c \
            "$BUILD/libcommon.a" -lhs -lm
        ;;
    *)
        echo "build.sh: unknown program $1" >&2
        exit 2
        ;;
    esac
    echo "  built $BUILD/bin/$1"
}

if [ $# -eq 0 ]; then set -- connload tlsload scan udpflood; fi
for p in "$@"; do build_one "$p"; done
