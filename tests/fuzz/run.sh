#!/usr/bin/env bash
# Runs the libFuzzer harnesses built into FUZZ_DIR (make fuzz, make fuzz-replay).
#   run.sh run FUZZ_DIR SECONDS NAME...     fuzz each harness for SECONDS, on its seeds
#                                           (tests/fuzz/corpus/NAME, and the binary ones
#                                           mkseeds made in FUZZ_DIR/seeds/NAME) and what earlier
#                                           runs kept (FUZZ_DIR/corpus/NAME); one line per harness:
#                                           executions, coverage, corpus size, crashes
#   run.sh replay FUZZ_DIR 0 NAME...        run each seed once
# A crash or leak leaves its input in FUZZ_DIR/crashes/ and fails the run. The last line:
# `fuzz: N passed, N failed`.
set -u
mode=$1 dir=$2 secs=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
passed=0 failed=0
mkdir -p "$dir/crashes" "$dir/logs"
for name in "$@"; do
  bin=$dir/$name log=$dir/logs/$name.log
  seeds=()
  for d in "$here/corpus/$name" "$dir/seeds/$name"; do
    [[ -d $d ]] && seeds+=("$d")
  done
  if [[ ! -x $bin ]]; then
    echo "  FAIL $name: $bin is not built"
    failed=$((failed + 1))
    continue
  fi
  if [[ $mode == replay ]]; then
    shopt -s nullglob
    files=()
    for d in "${seeds[@]}"; do files+=("$d"/*); done
    shopt -u nullglob
    if ((${#files[@]} == 0)); then
      echo "  FAIL $name: no seeds (tests/fuzz/corpus/$name, $dir/seeds/$name)"
      failed=$((failed + 1))
      continue
    fi
    if "$bin" -runs=1 "${files[@]}" >"$log" 2>&1; then
      echo "  PASS $name: ${#files[@]} seeds"
      passed=$((passed + 1))
    else
      echo "  FAIL $name: a seed crashes it (see $log)"
      tail -n 20 "$log"
      failed=$((failed + 1))
    fi
    continue
  fi
  mkdir -p "$dir/corpus/$name"
  # -rss_limit_mb: the harnesses hold a few MiB each; more is a leak or a runaway parser
  "$bin" -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$dir/crashes/$name-" "$dir/corpus/$name" "${seeds[@]}" >"$log" 2>&1
  rc=$?
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -n1)
  corp=$(find "$dir/corpus/$name" -type f | wc -l)
  if ((rc == 0)); then
    echo "  PASS $name: ${execs:-?} executions in ${secs}s, ${cov:-cov: ?}, corpus $corp"
    passed=$((passed + 1))
  else
    echo "  FAIL $name: exit $rc after ${execs:-?} executions (input in $dir/crashes/, log $log)"
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*Assertion)' "$log" | head -n 5
    failed=$((failed + 1))
  fi
done
echo "fuzz: $passed passed, $failed failed"
((failed == 0))
