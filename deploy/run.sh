#!/usr/bin/env bash
# `make run`: start controld (and through it the workers) on the embedded defaults, then say how
# to drive it. Usage: deploy/run.sh BIN_DIR
set -euo pipefail
bin=$(cd "${1:-build/bin}" && pwd)
run_dir=${FGEX_RUN_DIR:-/run/fgex}
state_dir=${FGEX_STATE_DIR:-/var/lib/fgex}
url="ipc://$run_dir/control.sock"

if [[ $(id -u) -ne 0 ]]; then
  echo "make run: controld needs root (nftables, NFQUEUE, raw sockets)" >&2
  exit 1
fi
if "$bin/fgexctl" -c "$url" status >/dev/null 2>&1; then
  echo "controld is already running ($url)."
else
  mkdir -p "$run_dir" "$state_dir"
  "$bin/controld" --state-dir "$state_dir" --run-dir "$run_dir"
  echo "controld started: state in $state_dir, control socket $url, log $run_dir/controld.log"
fi
cat <<MSG

Drive it with fgexctl (as root on this box; -c URL or \$FGEX_URL for another socket):

  $bin/fgexctl status
  $bin/fgexctl service add web --proto tcp --port 8080
  $bin/fgexctl filter add web 'flag\{[A-Za-z0-9]+\}' --dir s2c
  $bin/fgexctl filter add web 'evil[0-9]+' --nocase
  $bin/fgexctl service list
  $bin/fgexctl filter list web
  $bin/fgexctl --json service list

Stop everything (removes fgex's nftables rules): make stop
MSG
