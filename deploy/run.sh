#!/usr/bin/env bash
# `make run`: start controld (and through it the workers), then say how to drive it.
# Usage: deploy/run.sh BIN_DIR [NAME=VALUE]...
# Each NAME=VALUE is a controld setting, named as its long option in capitals with `_` for `-`
# (`make run LISTEN=tls+tcp://0.0.0.0:7443 ALLOW="10.60.0.0/16 fd00::/8" THREADS=2`): it is
# passed on the command line, so it wins over /etc/fgex/controld.conf, which controld reads as
# always. A flag takes true/false (yes/no, 1/0); ALLOW takes several values. Nothing else is
# passed and nothing is written: controld's defaults and its configuration file decide the rest.
set -euo pipefail
bin=$(cd "${1:-build/bin}" && pwd)
shift || true

if [[ $(id -u) -ne 0 ]]; then
  echo "make run: controld needs root (nftables, NFQUEUE, raw sockets)" >&2
  exit 1
fi

# controld's options, from the synopsis of its --help: "[--name ARG]" takes a value,
# "[--name]" is a flag. Generic, so that a new option is a setting at once.
declare -A takes_value=()
# (sed reads its input to the end: a reader that quits early would kill --help with SIGPIPE,
# which pipefail turns into a failed `make run`, issue 24)
synopsis=$("$bin/controld" --help | sed '/^defaults:/,$d')
while read -r name rest; do
  if [[ $rest == \]* ]]; then takes_value[$name]=0; else takes_value[$name]=1; fi
done < <(grep -oE -- '--[a-z][a-z-]*(\]| [^-[])' <<<"$synopsis" | sed -E 's/^--//; s/(\]| .)$/ \1/')

args=()
run_dir="" config=""
for kv in "$@"; do
  name=${kv%%=*}
  value=${kv#*=}
  key=$(tr 'A-Z_' 'a-z-' <<<"$name")
  if [[ $kv != *=* || -z ${takes_value[$key]+set} || $key == help || $key == version ]]; then
    # make's own variables (V, SANITIZE, BUILD, CC, ...) come along in MAKEOVERRIDES
    case $name in
      V | SANITIZE | BUILD | CC | CFLAGS | PREFIX | DESTDIR) ;;
      *) echo "make run: $name is not a controld setting (see controld --help); ignored" >&2 ;;
    esac
    continue
  fi
  if ((takes_value[$key] == 0)); then
    case ${value,,} in
      true | yes | 1 | on) args+=("--$key") ;;
      false | no | 0 | off | "") ;;
      *) echo "make run: $name is a flag: true or false, not '$value'" >&2; exit 2 ;;
    esac
  elif [[ $key == allow ]]; then
    for v in ${value//,/ }; do args+=("--allow=$v"); done
  else
    args+=("--$key=$value")
    [[ $key == run-dir ]] && run_dir=$value
    [[ $key == config ]] && config=$value
  fi
done

# Where the control socket will be: the setting, else the configuration file's, else /run/fgex.
if [[ -z $run_dir ]]; then
  conf=${config:-/etc/fgex/controld.conf}
  [[ -r $conf ]] && run_dir=$(sed -nE 's/^[[:space:]]*run-dir[[:space:]]*=[[:space:]]*(.*[^[:space:]])[[:space:]]*$/\1/p' "$conf" | tail -n1)
  run_dir=${run_dir:-/run/fgex}
fi
url="ipc://$run_dir/control.sock"

if "$bin/fgexctl" -c "$url" status >/dev/null 2>&1; then
  echo "controld is already running ($url)."
else
  "$bin/controld" "${args[@]}"
  echo "controld started${args[*]:+ with ${args[*]}}: control socket $url, log $run_dir/controld.log"
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

Stop everything (removes fgex's nftables rules): make stop$([[ $run_dir == /run/fgex ]] || echo " RUN_DIR=$run_dir")
MSG
