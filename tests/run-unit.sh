#!/usr/bin/env bash
# Unit tests: runs every BUILD_DIR/tests/test_* Criterion binary and adds up their synthesis
# lines. Prints each binary's failures and skipped tests (with their reasons), then
# `unit: N passed, N failed, N skipped` as its last line; exits non-zero if any test failed or
# any binary died without a synthesis (crash, timeout).
set -u
build=${1:-build}
dir=$build/tests
passed=0
failed=0
skipped=0
shopt -s nullglob
bins=("$dir"/test_*)
if ((${#bins[@]} == 0)); then
  echo "unit: no test binaries in $dir (run 'make BUILD=$build unit-tests')" >&2
fi
for bin in "${bins[@]}"; do
  [[ -x $bin && -f $bin ]] || continue
  name=${bin##*/}
  # --verbose: Criterion names a skipped test only so ("[SKIP] suite::name: reason")
  out=$(timeout -k 5 300 "$bin" --ascii --verbose -j2 2>&1)
  rc=$?
  out=$(sed 's/\x1b\[[0-9;]*m//g' <<<"$out")
  # Criterion: "[====] Synthesis: Tested: X | Passing: Y | Failing: Z | Crashing: W";
  # Failing already includes the crashes, and skipped tests are not in Tested.
  syn=$(grep -E 'Synthesis: Tested: [0-9]+' <<<"$out" | tail -n1)
  skips=$(grep -E '^\[SKIP\] ' <<<"$out")
  s=0
  [[ -n $skips ]] && s=$(wc -l <<<"$skips")
  skipped=$((skipped + s))
  if [[ -z $syn ]]; then
    echo "FAIL $name: no Criterion synthesis (exit $rc)"
    sed 's/^/    | /' <<<"$out" | tail -n 20
    failed=$((failed + 1))
    continue
  fi
  t=$(sed -E 's/.*Tested: ([0-9]+).*/\1/' <<<"$syn")
  p=$(sed -E 's/.*Passing: ([0-9]+).*/\1/' <<<"$syn")
  passed=$((passed + p))
  failed=$((failed + t - p))
  sk=""
  ((s > 0)) && sk=", $s skipped"
  if ((t != p)) || ((rc != 0)); then
    echo "FAIL $name: $t tested, $p passing$sk (exit $rc)"
    grep -E '^\[(----|FAIL)\]' <<<"$out" | grep -v '^\[----\] Criterion v' | sed 's/^/    | /' |
      sed -n 1,60p
    # a non-zero exit with every test passing (e.g. a leak report) is a failure too
    ((t == p)) && failed=$((failed + 1))
  else
    echo "ok   $name: $p passed$sk"
  fi
  # each reason once, with how many tests it skipped
  if ((s > 0)); then
    sed -E 's/^\[SKIP\] [^:]+::[^:]+: ?//' <<<"$skips" | sort | uniq -c |
      sed -E 's/^ *([0-9]+) (.*)/    skipped \1: \2/'
  fi
done
echo "unit: $passed passed, $failed failed, $skipped skipped"
((failed == 0))
