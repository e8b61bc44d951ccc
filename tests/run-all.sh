#!/usr/bin/env bash
# `make test`: the unit tests (run-unit.sh), the fuzzing harnesses over their seeds
# (fuzz/run.sh replay, when FUZZ_DIR is given: seconds), then the integration tests
# (integration/run.sh) against BUILD_DIR/bin. The last line adds them up:
# `N passed, N failed[, N skipped]`; the exit status is non-zero if anything failed.
set -u
build=${1:-build}
fuzz=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "== unit tests ($build/tests)"
"$here/run-unit.sh" "$build" | tee "$log"
urc=${PIPESTATUS[0]}
uline=$(grep -E '^unit: [0-9]+ passed, [0-9]+ failed' "$log" | tail -n1)

fline="fuzz: 0 passed, 0 failed" frc=0
if [[ -n $fuzz ]]; then
  echo "== fuzzing seeds ($fuzz)"
  mapfile -t harnesses < <(cd "$here/fuzz" && ls fuzz_*.c | sed 's/\.c$//')
  "$here/fuzz/run.sh" replay "$fuzz" 0 "${harnesses[@]}" | tee "$log"
  frc=${PIPESTATUS[0]}
  fline=$(grep -E '^fuzz: [0-9]+ passed, [0-9]+ failed' "$log" | tail -n1)
fi

echo "== integration tests ($build/bin)"
bindir=$build/bin
[[ -d $bindir ]] && bindir=$(cd "$bindir" && pwd)
FGX_BIN=$bindir "$here/integration/run.sh" | tee "$log"
irc=${PIPESTATUS[0]}
iline=$(grep -E '^integration: [0-9]+ passed, [0-9]+ failed' "$log" | tail -n1)

num() { sed -nE "s/.* ([0-9]+) $2.*/\1/p" <<<"$1"; }
up=$(num "$uline" passed); uf=$(num "$uline" failed)
ip=$(num "$iline" passed); if_=$(num "$iline" failed); is=$(num "$iline" skipped)
fp=$(num "$fline" passed); ff=$(num "$fline" failed)
passed=$((${up:-0} + ${ip:-0} + ${fp:-0}))
failed=$((${uf:-0} + ${if_:-0} + ${ff:-0}))
us=$(num "$uline" skipped)
skipped=$((${is:-0} + ${us:-0}))
# a runner that died without its summary line counts as one failure
[[ -z $uline ]] && failed=$((failed + 1))
[[ -z $iline ]] && failed=$((failed + 1))
[[ -z $fline ]] && failed=$((failed + 1))
((frc != 0 && ${ff:-0} == 0)) && failed=$((failed + 1))
((urc != 0 && ${uf:-0} == 0 && ${#uline} > 0)) && failed=$((failed + 1))
((irc != 0 && ${if_:-0} == 0 && ${#iline} > 0)) && failed=$((failed + 1))

summary="$passed passed, $failed failed"
((skipped > 0)) && summary+=", $skipped skipped"
echo "$summary"
((failed == 0))
