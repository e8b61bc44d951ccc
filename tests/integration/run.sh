#!/usr/bin/env bash
# Integration tests: runs each tests/integration/test_*.py module (or the ones named as
# arguments) with Debian's python3 against the programs in $FGX_BIN (default build/bin). Every
# module builds and removes its own network namespaces. Not root: every test is skipped, with the
# reason. Last line: `integration: N passed, N failed, N skipped`.
# FGX_IT_ONLY=REGEX runs matching tests only; FGX_IT_VERBOSE=1 shows tracebacks and controld logs;
# FGX_IT_KEEP=1 keeps the temp dirs (controld logs, LMDB state).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export FGX_BIN=$(cd "${FGX_BIN:-$root/build/bin}" 2>/dev/null && pwd || echo "${FGX_BIN:-$root/build/bin}")
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the source tree
per_module_timeout=${FGX_IT_TIMEOUT:-300}

if (($# > 0)); then
  mods=()
  for m in "$@"; do mods+=("$here/${m%.py}.py"); done
else
  mods=("$here"/test_*.py)
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "integration: SKIPPED, these tests need root (network namespaces, nftables, NFQUEUE)"
fi

passed=0
failed=0
skipped=0
start=$SECONDS
for mod in "${mods[@]}"; do
  name=$(basename "$mod" .py)
  echo "-- $name"
  out=$(mktemp)
  # a module may ask for more time than the default with a line "# fgx-it-timeout: SECONDS"
  limit=$per_module_timeout
  own=$(sed -nE 's/^# fgx-it-timeout: ([0-9]+)$/\1/p' "$mod" | sed -n 1p)
  [[ -n $own && $own -gt $limit ]] && limit=$own
  timeout -k 10 "$limit" "$py" "$mod" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  res=$(grep -E '^RESULT passed=[0-9]+ failed=[0-9]+ skipped=[0-9]+' "$out" | tail -n1)
  if [[ -z $res ]]; then
    # died or timed out: what it reported counts, plus one failure for the module itself
    p=$(grep -c '^  PASS ' "$out")
    f=$(grep -c '^  FAIL ' "$out")
    echo "  FAIL $name: module ended without a result (exit $rc$( ((rc == 124)) && echo ", timed out after ${limit}s"))"
    passed=$((passed + p))
    failed=$((failed + f + 1))
  else
    read -r p f s < <(sed -E 's/RESULT passed=([0-9]+) failed=([0-9]+) skipped=([0-9]+)/\1 \2 \3/' <<<"$res")
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + s))
  fi
  rm -f "$out"
done
echo "integration: $passed passed, $failed failed, $skipped skipped ($((SECONDS - start))s)"
((failed == 0))
