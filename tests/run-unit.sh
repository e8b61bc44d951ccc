#!/usr/bin/env bash
# Unit tests: runs every BUILD_DIR/tests/test_* Criterion binary and adds up their synthesis
# lines. Prints each binary's failures, then `unit: N passed, N failed` as its last line; exits
# non-zero if any test failed or any binary died without a synthesis (crash, timeout).
set -u
build=${1:-build}
dir=$build/tests
passed=0
failed=0
shopt -s nullglob
bins=("$dir"/test_*)
if ((${#bins[@]} == 0)); then
  echo "unit: no test binaries in $dir (run 'make BUILD=$build unit-tests')" >&2
fi
for bin in "${bins[@]}"; do
  [[ -x $bin && -f $bin ]] || continue
  name=${bin##*/}
  out=$(timeout -k 5 300 "$bin" --ascii -j2 2>&1)
  rc=$?
  # Criterion: "[====] Synthesis: Tested: X | Passing: Y | Failing: Z | Crashing: W";
  # Failing already includes the crashes, and skipped tests are not in Tested.
  syn=$(sed 's/\x1b\[[0-9;]*m//g' <<<"$out" | grep -E 'Synthesis: Tested: [0-9]+' | tail -n1)
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
  if ((t != p)) || ((rc != 0)); then
    echo "FAIL $name: $t tested, $p passing (exit $rc)"
    sed 's/\x1b\[[0-9;]*m//g' <<<"$out" | grep -E '^\[(----|FAIL)\]' | sed 's/^/    | /' | sed -n 1,60p
    # a non-zero exit with every test passing (e.g. a leak report) is a failure too
    ((t == p)) && failed=$((failed + 1))
  else
    echo "ok   $name: $p passed"
  fi
done
echo "unit: $passed passed, $failed failed"
((failed == 0))
