#!/usr/bin/env bash
# `make stop [RUN_DIR=DIR]`: stop the controld that `make run` started; it stops its workers and
# removes the services' nftables rules on the way out. The firewall's table (fgexctl fw) stays in
# force until `fgexctl fw disable`.
set -euo pipefail
run_dir=/run/fgex
for kv in "$@"; do
  [[ $kv == RUN_DIR=* ]] && run_dir=${kv#RUN_DIR=}
done
pidfile="$run_dir/controld.pid"
if [[ ! -f $pidfile ]]; then
  echo "controld is not running (no $pidfile)"
  exit 0
fi
pid=$(cat "$pidfile")
if ! kill -0 "$pid" 2>/dev/null; then
  echo "controld is not running (stale $pidfile)"
  exit 0
fi
kill -TERM "$pid"
for _ in $(seq 1 150); do
  kill -0 "$pid" 2>/dev/null || { echo "controld stopped"; exit 0; }
  sleep 0.1
done
echo "controld ($pid) did not stop within 15 s" >&2
exit 1
